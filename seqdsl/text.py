"""Text in, text out, for byte-level models: the decode loop (`LanguageModel.generate`, which
works on token tensors) with UTF-8 bytes as tokens on both sides.

    import seqdsl
    from seqdsl.lower.lm import build_lm

    lm = build_lm(seqdsl.load("spec.seq").program, preset="tiny")   # vocab 256: bytes
    seqdsl.generate_text(lm, "def ", steps=20, temperature=0.8)      # -> 20 bytes of text

A byte-level model is one whose vocabulary is the 256 byte values (the `tiny` preset's); any
other vocabulary needs its tokenizer, and is refused here rather than decoded into nonsense.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

import torch

from seqdsl.data.bytes import BYTE_VOCAB, decode_bytes, encode_bytes
from seqdsl.errors import SeqError

if TYPE_CHECKING:
    from seqdsl.lower.lm import LanguageModel


def generate_text(lm: LanguageModel, prompt: str, steps: int, *, temperature: float = 0.0,
                  generator: torch.Generator | None = None) -> str:
    """The `steps` bytes `lm` writes after `prompt`, as text (the prompt is not repeated).

    Greedy when `temperature` is 0, else sampled from softmax(logits / temperature) with
    `generator`. A continuation may end inside a multi-byte character, and an untrained model
    writes invalid UTF-8: such bytes come back as U+FFFD. One sequence (batch of 1) on the
    model's device."""
    if lm.spec.vocab != BYTE_VOCAB:
        raise SeqError(f"generate_text needs a byte-level model (vocab {BYTE_VOCAB}); "
                       f"model {lm.spec.name} has vocab {lm.spec.vocab}",
                       hint='use `preset = "tiny"` (vocab 256), or `LanguageModel.generate` with your tokenizer')
    if not prompt:
        raise SeqError("generate_text needs a prompt of at least one character",
                       hint="the model predicts the next byte from the ones before it")
    device = next(lm.parameters()).device
    tokens = encode_bytes(prompt).to(device).unsqueeze(0)  # (1, T)
    out = lm.generate(tokens, steps, temperature=temperature, generator=generator)
    return decode_bytes(out[0, tokens.shape[1]:].cpu())
