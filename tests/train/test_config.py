"""The run config: recipes load, `--set` overrides reach nested fields with JSON values, flags
win, and mistakes are one message."""

from __future__ import annotations

from pathlib import Path

import pytest

from seqdsl.errors import SeqError
from seqdsl.run.config import DataConfig, load_config
from seqdsl.run.digest import config_digest
from seqdsl.train.setup import resolve_model

ROOT = Path(__file__).resolve().parents[2]


@pytest.mark.parametrize("recipe", sorted((ROOT / "recipes").glob("*.toml")), ids=lambda p: p.name)
def test_recipes_load(recipe):
    config = load_config(str(recipe), spec="specs/transformer.seq")
    assert config.tokens // (config.batch * (config.seq_len or 2048)) >= 1


def test_overrides_then_flags(tmp_path):
    (tmp_path / "run.json").write_text('{"lr": 0.1, "data": {"heldout": 0.5}}')
    config = load_config(str(tmp_path / "run.json"),
                         ["data.train_domains=[\"*\"]", "data.tokenizer=bytes", "preset=null", "lr=0.2"],
                         lr=0.3, seed=None)
    assert config.lr == 0.3 and config.seed == 0 and config.preset is None
    assert config.data.heldout == 0.5 and config.data.train_domains == ["*"]
    assert config.data.training_domains(["a", "b"]) == ["a", "b"]


@pytest.mark.parametrize("overrides, message", [
    (["lr"], "bad --set"),
    (["nonsense=1"], "--set nonsense=1: unknown config key `nonsense`"),
    (["data.heldout=2"], "--set data.heldout=2: input should be less than 1"),
    (["data.source=files"], "--set data.source=files: data.source = files needs data.files"),
    (["parallel=zero3"], "--set parallel=zero3: input should be 'ddp' or 'fsdp'"),
])
def test_config_mistakes_are_one_message(overrides, message):
    with pytest.raises(SeqError, match=message):
        load_config(None, overrides)


def test_unreadable_config_file(tmp_path):
    with pytest.raises(SeqError, match="cannot read config"):
        load_config(str(tmp_path / "missing.toml"))
    (tmp_path / "bad.toml").write_text("lr = = 1")
    with pytest.raises(SeqError, match="not valid TOML"):
        load_config(str(tmp_path / "bad.toml"))


def test_resolved_model_is_resized_and_reloadable():
    import seqdsl

    config = load_config(None, spec=str(ROOT / "specs" / "top1_chunk_exact.seq"), seq_len=128)
    model = resolve_model(config, vocab=300)
    assert (model.spec.vocab, model.spec.context, model.spec.d_model) == (300, 128, 128)
    again = seqdsl.loads(model.text).program
    assert again.models == (model.spec,)


def test_resume_digest_ignores_how_the_batch_is_spread_but_not_what_is_trained():
    resolved = {"lr": 0.1, "batch": 16, "processes": 1, "micro_batch": 16, "accumulation": 1, "parallel": "single"}
    spread = dict(resolved, processes=8, micro_batch=1, accumulation=2, parallel="fsdp")
    assert config_digest(spread) == config_digest(resolved)
    for key, value in (("lr", 0.2), ("batch", 32)):
        assert config_digest(dict(resolved, **{key: value})) != config_digest(resolved)


def test_resume_digest_hashes_the_tokenizer_file_not_its_path(tmp_path):
    """A run resumes with its tokenizer.json copied elsewhere, and refuses one edited in place."""
    first, copy = tmp_path / "a" / "tokenizer.json", tmp_path / "b" / "tokenizer.json"
    for path in (first, copy):
        path.parent.mkdir()
        path.write_text('{"model": {"vocab": {"a": 0}}}')

    def digest(path: Path) -> str:
        return config_digest({"lr": 0.1, "data": {"tokenizer": str(path), "token_cache": True}})

    assert digest(copy) == digest(first)
    copy.write_text('{"model": {"vocab": {"b": 0}}}')
    assert digest(copy) != digest(first)
    assert config_digest({"data": {"tokenizer": "bytes"}}) != digest(first)


def test_a_missing_tokenizer_file_is_one_message(tmp_path):
    with pytest.raises(SeqError, match="cannot read tokenizer"):
        config_digest({"data": {"tokenizer": str(tmp_path / "gone.json")}})


def test_a_context_the_ir_refuses_is_one_message():
    """The trained model is rebuilt through the IR's validation, not copied past it."""
    config = load_config(None, ["preset=null"], spec=str(ROOT / "specs" / "transformer.seq"), seq_len=10**12)
    with pytest.raises(SeqError, match="cannot be trained at context"):
        resolve_model(config, vocab=256)


def _refusal(*args, **flags) -> str:
    with pytest.raises(SeqError) as refused:
        load_config(*args, **flags)
    return refused.value.render()


RECIPE = '''\
# a recipe with mistakes
preset = "tiny"
tokns = 1000
warmpu = """
lr = -5
"""
files = [
  [1, 2],
  [3]
]
lr = -1

[data]
heldot = 0.1
'''


def test_an_unknown_key_in_a_toml_file_names_the_file_line_and_closest_key(tmp_path):
    path = tmp_path / "recipe.toml"
    path.write_text('# a recipe\npreset = "tiny"\ntokns = 1000\n\n[data]\nheldout = 0.1\n')
    assert _refusal(str(path)) == (f"{path}:3:1: error: unknown config key `tokns`\n"
                                   "   3 | tokns = 1000\n"
                                   "       ^^^^^\n"
                                   "  hint: did you mean `tokens`?")


def test_several_mistakes_are_one_message_each_at_its_line(tmp_path):
    path = tmp_path / "recipe.toml"
    path.write_text(RECIPE)  # neither `lr = -5` in a multi-line string nor `[3]` in an array is TOML's
    lines = _refusal(str(path)).splitlines()
    assert lines[0] == f"{path}:3:1: error: unknown config key `tokns`: did you mean `tokens`?"
    notes = [line for line in lines if ": note: " in line]
    assert notes == [f"{path}:4:1: note: unknown config key `warmpu`: did you mean `warmup`?",
                     f"{path}:7:1: note: unknown config key `files`: did you mean `data.files`?",
                     f"{path}:11:1: note: `lr` = -1: input should be greater than 0",
                     f"{path}:14:1: note: unknown config key `data.heldot`: did you mean `data.heldout`?"]


@pytest.mark.parametrize("text, line, column, message, hint", [
    ("tokens = 0\n", 1, 1, "`tokens` = 0: input should be greater than 0", None),
    ("seq_len = -64\n", 1, 1, "`seq_len` = -64: input should be greater than 0", None),
    ("[data]\n  source = \"files\"\n", 2, 3, "data.source = files needs data.files", None),
    ("heldout = 0.1\n", 1, 1, "unknown config key `heldout`", "did you mean `data.heldout`?"),
    ("[data]\nlr = 0.1\n", 2, 1, "unknown config key `data.lr`", "did you mean `lr`?"),
    ("[dta]\nheldout = 0.1\n", 1, 2, "unknown config key `dta`", "did you mean `data`?"),
    ("data.heldout = 2\n", 1, 1, "`data.heldout` = 2: input should be less than 1", None),
    ("data = { heldout = 0.1, shufle = true }\n", 1, 1, "unknown config key `data.shufle`",
     "the keys of [data]: " + ", ".join(DataConfig.model_fields)),
])
def test_toml_mistakes_name_the_line_of_their_key(tmp_path, text, line, column, message, hint):
    path = tmp_path / "run.toml"
    path.write_text(text)
    rendered = _refusal(str(path))
    assert rendered.splitlines()[0] == f"{path}:{line}:{column}: error: {message}"
    assert rendered.splitlines()[1] == f"{line:>4} | {text.splitlines()[line - 1]}"
    assert (f"  hint: {hint}" in rendered) if hint else ("hint" not in rendered)


def test_a_json_config_mistake_names_the_file_and_key(tmp_path):
    path = tmp_path / "run.json"
    path.write_text('{"lr": 0.1, "data": {"heldot": 0.1}}')
    assert _refusal(str(path)) == (f"error: {path}: unknown config key `data.heldot`\n"
                                   "  hint: did you mean `data.heldout`?")


def test_command_line_mistakes_name_the_words_that_made_them(tmp_path):
    path = tmp_path / "run.toml"
    path.write_text("lr = 0.1\nwarmup = 5\n")
    # the --set that overrides the file's (good) value is what is named, not the file
    assert _refusal(str(path), ["warmup=-1"]) == "error: --set warmup=-1: input should be greater than or equal to 0"
    assert _refusal(None, ["data.heldot=0.1"]) == ("error: --set data.heldot=0.1: unknown config key `data.heldot`\n"
                                                   "  hint: did you mean `data.heldout`?")
    both = _refusal(str(path), ["warmup=-1"], lr=-1.0).splitlines()  # one message, the second as a note
    assert sorted(line.partition(": ")[2] for line in both) == [
        "--lr -1.0: input should be greater than 0", "--set warmup=-1: input should be greater than or equal to 0"]
    assert [line.partition(": ")[0] for line in both] == ["error", "note"]
    assert _refusal(None, ["cuda_graphs=true"], compile=False) == (
        "error: --set cuda_graphs=true: cuda_graphs = true needs compile = true (the graphs are torch.compile's)")


def test_the_cli_prints_a_config_mistake_as_one_message(tmp_path, capsys):
    from seqdsl.cli.main import main

    path = tmp_path / "run.toml"
    path.write_text("preset = \"tiny\"\nwarmpu = 10\n")
    assert main(["train", str(ROOT / "specs" / "transformer.seq"), "--config", str(path)]) == 2
    assert capsys.readouterr().err == (f"{path}:2:1: error: unknown config key `warmpu`\n"
                                       "   2 | warmpu = 10\n"
                                       "       ^^^^^^\n"
                                       "  hint: did you mean `warmup`?\n")


def test_preset_is_one_typed_set_of_names():
    """The run config, `seqdsl train --preset` and `seqdsl lower --preset` take the IR's presets."""
    from typing import get_args

    from seqdsl.ir import nodes
    from seqdsl.run.config import RunConfig

    assert get_args(RunConfig.model_fields["preset"].annotation) == (nodes.Preset, type(None))
    assert "input should be 'tiny', '110m' or '1.3b'" in _refusal(None, ["preset=2b"])
