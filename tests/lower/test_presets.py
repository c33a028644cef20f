"""Presets (seqdsl/ir/presets.py): every spec builds at every preset, a hybrid keeps its layer
pattern, heads scale with the width, the model is named for its size, and bad requests get one
readable error."""

from __future__ import annotations

import pytest
import torch

import seqdsl
from seqdsl.errors import SeqError
from seqdsl.ir import nodes
from seqdsl.ir.layout import head_layout
from seqdsl.ir.presets import PresetError, apply_preset, model_at, preset_name, resize_mixer
from seqdsl.lower.lm import LanguageModel, build_lm
from tests.spec_library import SPEC_FILES, SPEC_IDS, SPECS_DIR


# 1.3b: 35 models of 24-48 layers, several seconds on 2 cores even on the meta device
PRESET_PARAMS = [pytest.param(p, marks=pytest.mark.slow) if p == "1.3b" else p for p in nodes.PRESETS]


@pytest.mark.parametrize("preset", PRESET_PARAMS)
@pytest.mark.parametrize("path", SPEC_FILES, ids=SPEC_IDS)
def test_every_spec_builds_at_every_preset(path, preset):
    program = seqdsl.load(path).program
    resized = model_at(program, preset=preset)
    model = resized.model
    assert model.d_model == nodes.PRESET_SIZES[preset]["d_model"]
    assert model.name.endswith("_" + preset.replace(".", "_"))
    with torch.device("meta"):
        lm = LanguageModel(resized.program, model)
    assert {b.mixer.spec.name for b in lm.blocks} == set(model.mixer)  # every mixer keeps a layer
    for block in lm.blocks:
        mixer = block.mixer
        inner = mixer.plan.layout.heads * mixer.plan.layout.head_dim
        # the mixer's inner width keeps its ratio to d_model (110m is what the specs are written at)
        src = head_layout(program.mixer(mixer.spec.name), 768)
        assert inner * 768 == src.heads * src.head_dim * model.d_model


def test_hybrid_keeps_its_pattern_at_every_preset():
    program = seqdsl.load(SPECS_DIR / "hybrid_mamba2_transformer.seq").program
    for preset in nodes.PRESETS:
        resized = model_at(program, preset=preset)
        layers = resized.model.layers
        assert layers % 3 == 0 and layers >= 3
        kinds = [resized.model.mixer[i % 3] for i in range(layers)]
        assert kinds[:3] == ["mamba2", "mamba2", "transformer"]
    tiny = model_at(program, preset="tiny")
    assert tiny.model.layers == 3
    assert any("multiple of the 3-layer pattern" in note for note in tiny.notes)


def test_mixer_only_models_take_twice_the_layers():
    program = seqdsl.load(SPECS_DIR / "mamba2.seq").program
    # the spec is written at 110m with 24 layers: the 110m preset gives back the same model
    same = model_at(program, preset="110m")
    assert same.model == program.model("mamba2_110m").model_copy(update={"name": "mamba2_110m"})
    assert model_at(program, preset="1.3b").model.layers == 48  # Mamba's 1.3B configuration
    assert model_at(program, preset="tiny").model.layers == 4


def test_heads_scale_with_the_width():
    program = seqdsl.load(SPECS_DIR / "transformer.seq").program
    tiny = model_at(program, preset="tiny")
    mixer = tiny.program.mixer("transformer")
    assert (mixer.heads, mixer.head_dim) == (2, 64)  # 12 x 64 at 768 -> 2 x 64 at 128
    big = model_at(program, preset="1.3b").program.mixer("transformer")
    assert (big.heads, big.head_dim) == (32, 64)
    assert any("12 heads of 64 -> 2 heads of 64" in n for n in tiny.notes)


def test_head_dim_halves_when_it_does_not_fit():
    program = seqdsl.load(SPECS_DIR / "retnet.seq").program  # heads of 256, 3 at d_model 768
    tiny = model_at(program, preset="tiny").program.mixer("retnet")
    assert (tiny.heads, tiny.head_dim) == ("auto", 128)  # one head of 128 at d_model 128
    assert head_layout(tiny, 128).heads == 1


def test_explicit_key_dim_halves_with_head_dim_and_groups_keep_heads_per_group():
    m = seqdsl.loads("mixer g { heads = 4  head_dim = 256  key_dim = 128  kv_groups = 2 }").program.mixer("g")
    # inner 1024 -> 128: head_dim 256 -> 128 fits (1 head), but 2 query heads per key/value head
    # need 2 heads: one more halving, key_dim with it
    small, notes, not_kept = resize_mixer(m, 1024, 128)
    layout = head_layout(small, 128)
    assert (layout.heads, layout.head_dim, layout.key_dim, layout.kv_groups) == (2, 64, 32, 1)
    assert layout.heads // layout.kv_groups == 2 and not not_kept
    assert any("head_dim halved to keep 2 query heads per key/value head" in n for n in notes)
    mqa = seqdsl.loads("mixer q { heads = 12  kv_groups = 1 }").program.mixer("q")
    assert resize_mixer(mqa, 768, 2048)[0].kv_groups == 1  # multi-query stays multi-query
    gqa = seqdsl.loads("mixer q { heads = 12  kv_groups = 4 }").program.mixer("q")
    wide, _, lost = resize_mixer(gqa, 768, 2048)  # 32 heads: no power-of-two head count holds 3 per group
    assert wide.kv_groups == 8 and lost == ["mixer q: kv_groups 4 -> 8: 3 query heads per key/value head "
                                            "do not divide 32 heads; now 4"]


def test_gqa_keeps_its_ratio_of_query_to_key_heads():
    """Issue 20.2: GQA with 4 query heads per key/value head became 2 heads of 64 in one group
    at tiny (MQA with a ratio of 2); now head_dim halves until 4 heads share each key/value head."""
    gqa = seqdsl.loads("mixer g { heads = 16  kv_groups = 4  position = rope }\n"
                       "model g_1024 { layers = 2  d_model = 1024  vocab = 64  mixer = g }").program
    tiny = model_at(gqa, preset="tiny")
    layout = head_layout(tiny.program.mixer("g"), 128)
    assert (layout.heads, layout.head_dim, layout.kv_groups) == (4, 32, 1)
    assert 16 // 4 == layout.heads // layout.kv_groups  # the ratio as written
    assert not tiny.not_kept
    with torch.device("meta"):  # and it builds: 4 query heads on one cached key/value head
        block = LanguageModel(tiny.program, tiny.model).blocks[0].mixer
    assert (block.plan.layout.heads, block.plan.layout.kv_groups) == (4, 1)
    # a ratio no halving can keep (3 per group in 2 heads) is said, not silent
    odd = model_at(seqdsl.loads("mixer q { heads = 12  kv_groups = 4 }").program, preset="tiny")
    assert odd.not_kept == ("mixer q: kv_groups 4 -> 1: 3 query heads per key/value head do not divide "
                            "2 heads; now 2 (multi-query attention)",)


def test_resizing_keeps_every_other_slot():
    m = seqdsl.loads("mixer f { heads = 12  kv_groups = 4  position = rope  relation = dot(scale = learned(0.2))"
                     "  weights = softmax(temperature = learned(0.5)) }").program.mixer("f")
    small, notes, not_kept = resize_mixer(m, 768, 128)
    assert (small.heads, small.kv_groups) == (2, 1)  # 3 heads per group cannot fit in 2 heads
    assert small.model_copy(update={"heads": 12, "kv_groups": 4}) == m
    assert any("kv_groups 4 -> 1" in n for n in not_kept)


def test_preset_refuses_what_it_cannot_resize():
    m = seqdsl.loads("mixer odd { heads = 4  head_dim = 48 }").program.mixer("odd")
    with pytest.raises(PresetError, match="no halving of head_dim 48 divides"):
        resize_mixer(m, 192, 200)  # inner 192 -> 200: 48, 24, 12, 6, 3 never divide 200


def test_preset_is_validated_by_the_ir():
    program = seqdsl.load(SPECS_DIR / "transformer.seq").program
    with pytest.raises(PresetError, match="unknown preset"):
        apply_preset(program, program.model("transformer_110m"), "7b")
    assert issubclass(PresetError, SeqError)


def test_model_names_follow_the_size():
    assert preset_name("transformer_110m", "tiny") == "transformer_tiny"
    assert preset_name("x_1_3b", "110m") == "x_110m"
    assert preset_name("my_model", "1.3b") == "my_model_1_3b"


def test_build_lm_of_a_bare_mixer_resizes_its_explicit_heads():
    program = seqdsl.loads("mixer attn { heads = 12  head_dim = 64 }").program
    lm = build_lm(program)
    assert lm.spec.d_model == 128 and lm.blocks[0].mixer.plan.layout.heads == 2
    assert lm.blocks[0].mixer.v_proj.weight.shape == (128, 128)  # not 128 -> 768


def test_cli_lower_hybrid_at_every_preset_shows_both_mixers(capsys):
    from seqdsl.cli.main import main

    for preset in nodes.PRESETS:
        rc = main(["lower", str(SPECS_DIR / "hybrid_mamba2_transformer.seq"), "--preset", preset,
                   "--no-tree", "--device", "cpu"])
        out = capsys.readouterr().out
        assert rc == 0
        assert "mamba2:" in out and "transformer:" in out, out
        assert f"hybrid_mamba2_transformer_{preset.replace('.', '_')}" in out
    main(["lower", str(SPECS_DIR / "hybrid_mamba2_transformer.seq"), "--preset", "tiny", "--no-tree"])
    assert "preset tiny: layers 2 -> 3" in capsys.readouterr().out


def test_cli_lower_retnet_tiny_builds(capsys):
    from seqdsl.cli.main import main

    assert main(["lower", str(SPECS_DIR / "retnet.seq"), "--preset", "tiny", "--no-tree"]) == 0
    assert "mixer retnet: 3 heads of 256 -> 1 head of 128" in capsys.readouterr().out


def test_cli_lower_reports_a_refused_preset_in_one_message(tmp_path, capsys):
    from seqdsl.cli.main import main

    spec = tmp_path / "odd.seq"
    spec.write_text("mixer odd { heads = 4  head_dim = 48 }\n"
                    "model odd_lm { layers = 2  d_model = 192  vocab = 64  mixer = odd }\n")
    assert main(["lower", str(spec), "--preset", "tiny", "--no-tree"]) == 2
    err = capsys.readouterr().err
    assert "error: cannot resize mixer `odd` to d_model 128" in err and "Traceback" not in err


# --- issue 20.2: presets never change meaning silently ----------------------------------------------


def _window(resized) -> int:
    return resized.program.mixer("window_256").visibility.size


def test_window_256_at_tiny_keeps_its_ratio_and_still_fails():
    """`specs/window_256.seq` at tiny used to keep window(256) at tiny's 256-token context: full
    attention, so its verdict flipped from fail to pass with no word. The window now keeps its
    12.5% of the context (256/2048 = 32/256) and the resized model still fails V001."""
    from seqdsl.check.resized import model_verdict

    program = seqdsl.load(SPECS_DIR / "window_256.seq").program
    tiny = model_at(program, preset="tiny")
    assert tiny.model.name == "window_256_tiny" and tiny.model.context == 256
    assert _window(tiny) * 2048 == 256 * tiny.model.context
    assert str(model_verdict(tiny.program, tiny.model)) == "window_256_tiny: fail (V001)"
    assert "mixer window_256: window(256) -> window(32): 12.5% of the 256-token context, as written" in tiny.notes
    assert not tiny.not_kept
    # and back up: tiny's window(32) at 256 is window(256) again at 2048
    back = apply_preset(tiny.program, tiny.model, "110m")
    assert _window(back) == 256 and back.model.name == "window_256_110m"
    # the selection chunk of Top-1 chunk keeps its share too: 16 chunks of the context
    chunked = model_at(seqdsl.load(SPECS_DIR / "top1_chunk_exact.seq").program, preset="tiny")
    assert chunked.program.mixer("top1_chunk_exact").select.over.size == 256 // 16


def test_keep_absolute_keeps_tokens_and_says_the_verdict_changed():
    """The knob that keeps windows in tokens: the resized model is then full attention, which
    is said as not kept, and the verdict change is printed beside the verdict as written."""
    from seqdsl.check.resized import resize_report

    program = seqdsl.load(SPECS_DIR / "window_256.seq").program
    kept = model_at(program, preset="tiny", keep_absolute=True)
    assert _window(kept) == 256
    assert kept.not_kept == ("mixer window_256: dense attention at this size (window(256) covers the "
                             "256-token context), not as written",)
    report = resize_report(program, kept)
    assert report[-1] == ("check at preset tiny: window_256_tiny: pass; as written: window_256_110m: fail (V001)"
                          " -- the resize changed the verdict from fail to pass")
    assert build_lm(program, preset="tiny", keep_absolute=True).blocks[0].mixer.spec.visibility.size == 256
    assert build_lm(program, preset="tiny").blocks[0].mixer.spec.visibility.size == 32


def test_an_inexact_ratio_is_reported_as_not_kept():
    program = seqdsl.loads("mixer w { visibility = window(100) }\n"
                           'model w_110m { preset = "110m"  mixer = w }').program
    tiny = model_at(program, preset="tiny")
    assert tiny.program.mixer("w").visibility.size == 12  # 100 x 256 / 2048 = 12.5: the nearest
    assert tiny.not_kept == ("mixer w: window(100) -> window(12): 4.69% of the 256-token context, not the "
                             "4.88% of the 2048-token context as written (the nearest whole size)",)


def test_training_resizes_to_its_sequence_length_and_reports_the_verdict(tmp_path):
    """`seqdsl train` trains at seq_len, not at the preset's context: windows keep their ratio to
    the context trained at, and the run's first messages carry the resize and its verdict.
    The config key `keep_absolute` (flag --keep-absolute) is the same knob as `lower`'s."""
    from seqdsl.run.config import load_config
    from seqdsl.run.digest import config_digest
    from seqdsl.train.setup import resolve_model

    spec = str(SPECS_DIR / "window_256.seq")
    model = resolve_model(load_config(None, spec=spec, seq_len=128), vocab=256)
    assert model.spec.context == 128 and model.program.mixer("window_256").visibility.size == 16
    assert "window(16)" in model.text
    assert model.report[-1] == ("check at preset tiny: window_256_tiny: fail (V001); "
                                "as written: window_256_110m: fail (V001)")
    absolute = resolve_model(load_config(None, ["keep_absolute=true"], spec=spec, seq_len=128), vocab=256)
    assert absolute.program.mixer("window_256").visibility.size == 256
    assert "changed the verdict from fail to pass" in absolute.report[-1]
    assert load_config(None, spec=spec, keep_absolute=True).keep_absolute  # the CLI flag's way in
    # the knob reaches the run only through the spec, which the resume digest covers
    same = {"spec_digest": model.digest, "lr": 1.0}
    assert config_digest({**same, "keep_absolute": True}) == config_digest({**same, "keep_absolute": False})
    assert config_digest({**same, "spec_digest": absolute.digest}) != config_digest(same)


def test_cli_lower_prints_the_resized_verdict_and_the_knob(capsys):
    from seqdsl.cli.main import main

    path = str(SPECS_DIR / "window_256.seq")
    assert main(["lower", path, "--preset", "tiny", "--no-tree", "--device", "cpu"]) == 0
    out = capsys.readouterr().out
    assert "  preset tiny: mixer window_256: window(256) -> window(32)" in out
    assert "  check at preset tiny: window_256_tiny: fail (V001); as written: window_256_110m: fail (V001)\n" in out
    assert main(["lower", path, "--preset", "tiny", "--keep-absolute", "--no-tree", "--device", "cpu"]) == 0
    out = capsys.readouterr().out
    assert "  preset tiny, not kept: mixer window_256: dense attention at this size" in out
    assert "the resize changed the verdict from fail to pass" in out
    assert "window_256: sdpa.causal (dense: window(256) covers the 256-token context" in out
    assert main(["lower", path, "--keep-absolute", "--no-tree"]) == 2
    assert "--keep-absolute applies to a resize" in capsys.readouterr().err


def test_a_spec_that_cannot_resize_is_told_by_lower(tmp_path, capsys):
    """Issue 20.2: a head_dim-96 DeltaNet lowers as written, but no preset but its own can
    resize it; `lower` says so before anyone asks for --preset (and `check` does: M004)."""
    from seqdsl.cli.main import main

    spec = tmp_path / "deltanet96.seq"
    spec.write_text(f'import "{SPECS_DIR / "deltanet.seq"}"\n'
                    "mixer deltanet96 extends deltanet { heads = auto  head_dim = 96 }\n"
                    "model deltanet96_110m extends deltanet_110m { mixer = deltanet96 }\n")
    assert main(["lower", str(spec), "--no-tree", "--device", "cpu"]) == 0
    out = capsys.readouterr().out
    assert ("  preset tiny: cannot resize mixer `deltanet96` to d_model 128: its 8 heads of 96 (768 wide) "
            "scale to 128, and no halving of head_dim 96 divides 128\n") in out
    assert "  preset 1.3b: cannot resize mixer `deltanet96` to d_model 2048" in out
    assert "preset 110m" not in out
    assert main(["check", str(spec)]) == 1
    assert capsys.readouterr().out.count("M004 [M warning] preset-refused") == 2


def test_model_names_keep_a_size_in_the_name():
    """`window_256_110m` is window_256 at 110m: its tiny model is `window_256_tiny`, not `window_tiny`."""
    assert preset_name("window_256_110m", "tiny") == "window_256_tiny"
    assert preset_name("window_256", "1.3b") == "window_256_1_3b"
