"""Byte-level tokens and random training windows: the embedded default, no tokenizer file needed.

Shape legend: B batch, T window length.
"""

from __future__ import annotations

import torch
from torch import Tensor

BYTE_VOCAB = 256


def encode_bytes(text: str) -> Tensor:
    """UTF-8 bytes of `text` as a 1-D int64 tensor (vocab 256)."""
    return torch.frombuffer(bytearray(text.encode("utf-8")), dtype=torch.uint8).long()


def decode_bytes(tokens: Tensor) -> str:
    """The text of 1-D byte tokens; bytes that are not valid UTF-8 (an untrained model emits
    plenty) become U+FFFD rather than an error."""
    return bytes(tokens.tolist()).decode("utf-8", errors="replace")


def random_windows(tokens: Tensor, batch: int, length: int, generator: torch.Generator):
    """Endless (inputs, targets) pairs of shape (B, T): random windows of `tokens`, the targets
    shifted by one. Deterministic given the generator's seed."""
    if tokens.numel() < length + 1:
        raise ValueError(f"need at least {length + 1} tokens, got {tokens.numel()}")
    offsets = torch.arange(length + 1)
    while True:
        # a window is length + 1 tokens, so starts run over [0, numel - length - 1] inclusive
        # (randint's upper bound is exclusive)
        starts = torch.randint(0, tokens.numel() - length, (batch, 1), generator=generator)
        window = tokens[starts + offsets]
        yield window[:, :-1], window[:, 1:]
