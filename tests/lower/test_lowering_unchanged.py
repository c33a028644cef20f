"""What a refactoring of the lowering must keep: checkpoints load, outputs stay.

`lowering_unchanged.json` was recorded from main at fe64376, before the lowering read a
`MixerPlan`: for every spec of the library at the `tiny` preset, the model's state_dict (every key,
in order, with its shape: a checkpoint of that commit loads, and an optimizer's per-index state
lines up) and a few logits of a float64 forward from seed 0 (parameters are drawn in the same
order and applied the same way). A deliberate change of parameters or initialisation regenerates
it (`python -m tests.lower.test_lowering_unchanged`) in the commit that makes the change.
"""

from __future__ import annotations

import json
from pathlib import Path

import pytest
import torch

from seqdsl.lower.lm import LanguageModel
from tests.spec_library import SPEC_FILES, SPEC_IDS, at_most_heads, spec_model

FIXTURE = Path(__file__).with_name("lowering_unchanged.json")
T = 8  # tokens of the logits forward
LOGITS = 16  # logits kept per position
TOL = 1e-12  # float64: the same operations in the same order give the same bits; a margin for reordering


def _model(path: Path) -> LanguageModel:
    """The spec at the tiny preset (the library's test size), narrowed where Mamba-1's 256 heads
    would make a forward take seconds."""
    program, model = spec_model(path)
    model = at_most_heads(program, model)
    torch.manual_seed(0)
    return LanguageModel(program, model).double()


def record(path: Path) -> dict:
    lm = _model(path)
    tokens = torch.arange(T).remainder(lm.spec.vocab)[None]
    with torch.no_grad():
        logits, _ = lm(tokens)
    program, model = spec_model(path)
    torch.manual_seed(0)
    full = LanguageModel(program, model)  # the tiny preset as written: its checkpoint's keys
    return {"state_dict": [[k, list(v.shape)] for k, v in full.state_dict().items()],
            "logits": logits[0, :, :LOGITS].tolist()}


@pytest.fixture(scope="module")
def recorded() -> dict:
    return json.loads(FIXTURE.read_text())


def test_the_fixture_covers_the_library(recorded):
    assert sorted(recorded) == sorted(SPEC_IDS)


@pytest.mark.parametrize("path", SPEC_FILES, ids=SPEC_IDS)
def test_checkpoint_keys_and_outputs_are_as_recorded(recorded, path):
    want, got = recorded[path.stem], record(path)
    assert got["state_dict"] == want["state_dict"]
    diff = (torch.tensor(got["logits"]) - torch.tensor(want["logits"])).abs().max().item()
    assert diff <= TOL * max(1.0, torch.tensor(want["logits"]).abs().max().item()), diff


if __name__ == "__main__":  # one spec per line
    FIXTURE.write_text("{\n" + ",\n".join(f"{json.dumps(p.stem)}: {json.dumps(record(p), separators=(',', ':'))}"
                                          for p in SPEC_FILES) + "\n}\n")
