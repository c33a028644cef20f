"""A window model cannot reach a key beyond its window: at an MQAR query whose pair lies further
back than the model's receptive field (layers x (window - 1) tokens), the output does not depend
on the pair at all, so no training can beat chance there. Checked structurally: the logits at
such a query are unchanged when every key and value of the row's pairs is replaced. The same
check on full attention must see a change (the test can fail).

Also through the probe's own model builder: window(256) written for a 2048-token context is
resized to an eighth of the probe's context, and is as blind beyond it."""

from __future__ import annotations

import torch

import seqdsl
from seqdsl.lower.lm import LanguageModel
from seqdsl.probe.batch import Level
from seqdsl.probe.fit import answer_logits
from seqdsl.probe.model import build, probe_model
from seqdsl.probe.recall import MQAR

SPEC = """
mixer local {{ heads = 2  head_dim = 32  position = rope  visibility = {visibility} }}
model local_probe {{ layers = 2  d_model = 64  vocab = 64  context = 64  mixer = local }}
"""
LEVEL = Level.of(64, pairs=4, queries=4)  # pairs at 0..7, queries after


def _model(visibility: str) -> LanguageModel:
    program = seqdsl.loads(SPEC.format(visibility=visibility)).program
    torch.manual_seed(0)
    return LanguageModel(program, program.model("local_probe")).eval()


def _pairs_replaced(inputs: torch.Tensor, task: MQAR, pairs: int) -> torch.Tensor:
    """The rows with every key and value of their pairs shifted to another id of its range
    (the queries after them keep their tokens)."""
    other = inputs.clone()
    keys = other[:, 0:2 * pairs:2]
    values = other[:, 1:2 * pairs:2]
    other[:, 0:2 * pairs:2] = keys % task.keys + 1  # key k -> k + 1, the last one -> 1
    other[:, 1:2 * pairs:2] = (values - task.keys) % task.values + task.keys + 1
    return other


def _far_queries(mask: torch.Tensor, reach: int, pairs: int) -> torch.Tensor:
    """The answer positions whose whole pair region lies beyond `reach` tokens back."""
    positions = torch.arange(mask.shape[1])
    return mask & (positions - reach > 2 * pairs - 1)


def _logit_change(lm: LanguageModel, reach: int) -> tuple[float, int]:
    task = MQAR(vocab=64)
    batch = task.sample(LEVEL, 16, torch.Generator().manual_seed(0))
    far = _far_queries(batch.mask, reach, 4)
    with torch.no_grad():
        before = answer_logits(lm, batch.inputs)[far]
        after = answer_logits(lm, _pairs_replaced(batch.inputs, task, 4))[far]
    return float((before - after).abs().max()), int(far.sum())


def test_window_8_model_is_blind_to_pairs_beyond_its_reach():
    change, queries = _logit_change(_model("window(8)"), reach=2 * 7)
    assert queries > 20, "enough queries beyond the reach to mean something"
    assert change < 1e-5


def test_full_attention_sees_the_same_pairs():
    change, queries = _logit_change(_model("full"), reach=2 * 7)
    assert queries > 20 and change > 1e-2


def test_window_256_at_the_probe_context_is_an_eighth_of_it_and_as_blind():
    pm = probe_model("specs/window_256.seq", vocab=64, context=64)
    mixer = pm.program.mixers[0]
    assert mixer.visibility.kind == "window" and mixer.visibility.size == 8
    assert pm.verdict.startswith("fail") and "V001" in pm.verdict_probed
    lm = build(pm, seed=0).eval()
    change, queries = _logit_change(lm, reach=pm.model.layers * 7)
    assert queries > 0 and change < 1e-5
