"""A `tiny` model of every spec learns real text on CPU: the loss falls over 50 steps.

The text is the builtin corpus (standard-library docstrings, always present), byte-level, so the
test needs no data files. Starting loss is ~ln(256) = 5.5 nats; unigram statistics alone bring a
byte model below ~3.5, so a drop of more than 1 nat means the optimiser and gradients work."""

from __future__ import annotations

import pytest
import torch

from seqdsl.data.builtin import builtin_text
from seqdsl.data.bytes import BYTE_VOCAB, encode_bytes, random_windows
from seqdsl.lower.lm import LanguageModel
from seqdsl.train.loop import fit
from tests.spec_library import SPEC_FILES, SPEC_IDS, longest_chunk, spec_model

STEPS = 50


@pytest.fixture(scope="module")
def tokens():
    return encode_bytes(builtin_text(200_000))


@pytest.mark.slow
@pytest.mark.parametrize("path", SPEC_FILES, ids=SPEC_IDS)
def test_tiny_model_loss_decreases_on_real_text(path, tokens):
    program, model = spec_model(path, vocab=BYTE_VOCAB)
    # long enough for two selection chunks where the spec selects chunks, short otherwise
    length = max(64, min(2 * longest_chunk(program, model) + 1, 257))
    model = model.model_copy(update={"context": max(model.context, length)})
    torch.manual_seed(0)
    lm = LanguageModel(program, model)
    batches = random_windows(tokens, 8, length, torch.Generator().manual_seed(0))
    losses = fit(lm, batches, STEPS, lr=3e-3, warmup=5)
    first, last = sum(losses[:5]) / 5, sum(losses[-5:]) / 5
    assert all(map(lambda x: x == x, losses)), "loss became nan"
    assert last < first - 1.0, f"loss {first:.2f} -> {last:.2f} did not fall by 1 nat in {STEPS} steps"
