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
        inner = mixer.H * mixer.Dv
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
    small, notes = resize_mixer(m, 1024, 128)  # inner 1024 -> 128: head_dim 256 -> 128, 1 head
    layout = head_layout(small, 128)
    assert (layout.heads, layout.head_dim, layout.key_dim, layout.kv_groups) == (1, 128, 64, 1)
    assert any("kv_groups 2 -> 1" in n for n in notes)
    mqa = seqdsl.loads("mixer q { heads = 12  kv_groups = 1 }").program.mixer("q")
    assert resize_mixer(mqa, 768, 2048)[0].kv_groups == 1  # multi-query stays multi-query
    gqa = seqdsl.loads("mixer q { heads = 12  kv_groups = 4 }").program.mixer("q")
    assert resize_mixer(gqa, 768, 2048)[0].kv_groups == 8  # 32 heads: 8 groups of 4 (3 per group does not divide 32)


def test_resizing_keeps_every_other_slot():
    m = seqdsl.loads("mixer f { heads = 12  kv_groups = 4  position = rope  relation = dot(scale = learned(0.2))"
                     "  weights = softmax(temperature = learned(0.5)) }").program.mixer("f")
    small, notes = resize_mixer(m, 768, 128)
    assert (small.heads, small.kv_groups) == (2, 1)  # 3 heads per group cannot fit in 2 heads
    assert small.model_copy(update={"heads": 12, "kv_groups": 4}) == m
    assert any("kv_groups 4 -> 1" in n for n in notes)


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
    assert lm.spec.d_model == 128 and lm.blocks[0].mixer.H == 2
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
    assert "preset: layers 2 -> 3" in capsys.readouterr().out


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
