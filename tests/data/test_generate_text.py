"""`seqdsl.generate_text`: text in, text out for byte-level models, checked against a decode
loop that re-runs the whole sequence each step (no carried state) and takes the argmax."""

from __future__ import annotations

import pytest
import torch

import seqdsl
from seqdsl.data.bytes import decode_bytes, encode_bytes
from seqdsl.lower.lm import build_lm
from tests.fresh_imports import heavy_imports

SPEC = 'mixer attn { position = rope }\nmodel m { preset = "tiny"  mixer = attn }\n'


@pytest.fixture(scope="module")
def lm():
    torch.manual_seed(0)
    return build_lm(seqdsl.loads(SPEC).program).double().eval()


def _greedy_without_state(lm, prompt: str, steps: int) -> list[int]:
    tokens = list(prompt.encode("utf-8"))
    for _ in range(steps):
        logits, _ = lm(torch.tensor([tokens]))
        tokens.append(int(logits[0, -1].argmax()))
    return tokens[len(prompt.encode("utf-8")):]


def test_greedy_text_is_the_argmax_continuation(lm):
    prompt = "déf "  # a two-byte character: tokens are bytes, not characters
    expected = _greedy_without_state(lm, prompt, 6)
    text = seqdsl.generate_text(lm, prompt, 6)
    assert text == bytes(expected).decode("utf-8", errors="replace"), "only the continuation"


def test_sampling_follows_the_generator(lm):
    def sample(seed):
        return seqdsl.generate_text(lm, "x", 8, temperature=1.0, generator=torch.Generator().manual_seed(seed))

    assert sample(1) == sample(1)
    assert len({sample(s) for s in range(4)}) > 1, "different seeds, different samples"


def test_a_model_with_another_vocabulary_is_refused():
    torch.manual_seed(0)
    big = build_lm(seqdsl.loads(SPEC.replace('preset = "tiny"', 'preset = "tiny"  vocab = 300')).program)
    with pytest.raises(seqdsl.SeqError, match="needs a byte-level model .* has vocab 300"):
        seqdsl.generate_text(big, "a", 1)


def test_an_empty_prompt_is_refused(lm):
    with pytest.raises(seqdsl.SeqError, match="prompt of at least one character"):
        seqdsl.generate_text(lm, "", 4)


def test_decode_bytes_replaces_invalid_utf8():
    assert decode_bytes(encode_bytes("naïve ✓")) == "naïve ✓"
    assert decode_bytes(torch.tensor([104, 0xC3, 105])) == "h\ufffdi"


def test_import_seqdsl_stays_torch_free():
    """`import seqdsl` in a fresh interpreter loads no torch; `seqdsl.generate_text` (which
    needs it) comes from seqdsl.text on first use."""
    assert heavy_imports("import seqdsl", ("torch",))[0] == []
    assert seqdsl.generate_text.__module__ == "seqdsl.text"
