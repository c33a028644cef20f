"""The run config: recipes load, `--set` overrides reach nested fields with JSON values, flags
win, and mistakes are one message."""

from __future__ import annotations

from pathlib import Path

import pytest

from seqdsl.errors import SeqError
from seqdsl.train.config import load_config
from seqdsl.train.setup import config_digest, resolve_model

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
    (["nonsense=1"], "bad run config: nonsense"),
    (["data.heldout=2"], "bad run config: data.heldout"),
    (["data.source=files"], "data.source = files needs data.files"),
    (["parallel=zero3"], "bad run config: parallel"),
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
