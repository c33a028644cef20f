"""Random training windows: every start can be drawn, targets are the inputs shifted by one."""

from __future__ import annotations

import itertools

import pytest
import torch

from seqdsl.data.bytes import encode_bytes, random_windows


def test_every_window_start_is_drawn():
    """Found in review: randint's exclusive upper bound meant the last start was never drawn."""
    tokens = torch.arange(6)  # token i sits at position i, so a window's first input is its start
    length = 3  # windows of length + 1 = 4 tokens: starts 0, 1, 2
    batches = random_windows(tokens, 16, length, torch.Generator().manual_seed(0))
    starts = set()
    for inputs, targets in itertools.islice(batches, 20):
        assert inputs.shape == targets.shape == (16, length)
        assert torch.equal(targets, inputs + 1), "targets are the inputs shifted by one"
        assert torch.equal(inputs, inputs[:, :1] + torch.arange(length)), "windows are contiguous"
        starts.update(inputs[:, 0].tolist())
    assert starts == {0, 1, 2}


def test_shortest_corpus_has_one_window():
    tokens = encode_bytes("abcd")
    inputs, targets = next(random_windows(tokens, 2, 3, torch.Generator().manual_seed(0)))
    assert inputs.tolist() == [list(b"abc")] * 2
    assert targets.tolist() == [list(b"bcd")] * 2


def test_too_short_a_corpus_is_refused():
    with pytest.raises(ValueError, match="need at least 4 tokens, got 3"):
        next(random_windows(torch.arange(3), 1, 3, torch.Generator()))
