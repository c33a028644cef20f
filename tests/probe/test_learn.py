"""A tiny Transformer++ learns MQAR at a small size: 2 pairs in 16 tokens, where guessing among
the values gets 1/16 and guessing among the two values in the row (the plateau a model sits on
before it learns to match keys) gets 1/2. This test trains 500 steps of 128 rows (half the
probe's default) and asks for more than 95%."""

from __future__ import annotations

import pytest
import torch

from seqdsl.probe.batch import Level
from seqdsl.probe.fit import Settings, score, train
from seqdsl.probe.model import build, probe_model
from seqdsl.probe.recall import MQAR


@pytest.mark.slow
def test_tiny_transformer_learns_mqar():
    task = MQAR(vocab=32)
    level = Level.of(16, pairs=2, queries=2)
    pm = probe_model("specs/transformer.seq", vocab=task.vocab, context=16)
    lm = build(pm, seed=0)
    settings = Settings(steps=500, batch=128, lr=1e-3, eval_examples=256)
    cpu = torch.device("cpu")
    before = score(lm, task, level, settings, device=cpu)
    losses = train(lm, task, (level,), settings, device=cpu)
    after = score(lm, task, level, settings, device=cpu)
    assert before.accuracy < 0.2, "an untrained model is near chance (the score can be low)"
    assert sum(losses[-20:]) / 20 < 0.1
    assert after.accuracy > 0.95, after
