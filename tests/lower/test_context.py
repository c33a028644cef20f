"""Running past the context, and what `generate` and `forward` refuse (docs/lowering.md, "Context"):
RoPE / no-position / recurrent models run past their context (evaluation at longer contexts),
mixers with per-position parameters refuse; bad decode inputs get one LoweringError each."""

from __future__ import annotations

import pytest
import torch

import seqdsl
from seqdsl.lower.lm import build_lm
from seqdsl.lower.mixer import LoweringError

CONTEXT = 16


def lm(mixer: str):
    program = seqdsl.loads(f"{mixer}\nmodel m {{ layers = 2  d_model = 32  vocab = 50  context = {CONTEXT}"
                           "  mixer = f }").program
    torch.manual_seed(0)
    return build_lm(program, "m").double()


@pytest.mark.parametrize("mixer", [
    "mixer f { heads = 2  head_dim = 16  position = rope }",
    "mixer f { heads = 2  head_dim = 16  position = alibi }",
    "mixer f { heads = 2  head_dim = 16  weights = linear  decay = constant }",
])
def test_position_free_mixers_run_past_the_context(mixer):
    model = lm(mixer)
    tokens = torch.randint(0, 50, (1, 2 * CONTEXT))
    logits, _ = model(tokens)
    assert torch.isfinite(logits).all()
    # causal: the first `CONTEXT` positions are those of the in-context forward
    inside, _ = model(tokens[:, :CONTEXT])
    assert torch.allclose(logits[:, :CONTEXT], inside, rtol=1e-10, atol=1e-12)
    assert model.generate(tokens[:, :CONTEXT], steps=4).shape == (1, CONTEXT + 4)


@pytest.mark.parametrize("mixer", [
    "mixer f { heads = 2  head_dim = 16  relation = random_keys }",
    "mixer f { heads = 2  head_dim = 16  relation = positional }",
])
def test_per_position_mixers_refuse_past_the_context(mixer):
    model = lm(mixer)
    assert model.positions_limit() == CONTEXT
    model(torch.randint(0, 50, (1, CONTEXT)))  # exactly the context is fine
    with pytest.raises(LoweringError, match=f"per-position parameters for its {CONTEXT}-token context"):
        model(torch.randint(0, 50, (1, CONTEXT + 1)))
    _, state = model(torch.randint(0, 50, (1, CONTEXT - 1)))
    with pytest.raises(LoweringError, match=f"position {CONTEXT + 1} is past it"):
        model(torch.randint(0, 50, (1, 2)), state)
    with pytest.raises(LoweringError, match="can hold 16 tokens"):
        model.generate(torch.randint(0, 50, (1, 10)), steps=7)


@pytest.fixture(scope="module")
def rope_lm():
    return lm("mixer f { heads = 2  head_dim = 16  position = rope }")


@pytest.mark.parametrize("prompt, kwargs, message", [
    (torch.zeros(1, 0, dtype=torch.long), {}, "at least one token"),
    (torch.tensor([[1, 50]]), {}, "token id 50 is outside the vocabulary"),
    (torch.tensor([[-1, 3]]), {}, "token id -1 is outside the vocabulary"),
    (torch.tensor([[1.0, 2.0]]), {}, "integer ids"),
    (torch.tensor([[1, 2]]), {"temperature": -0.5}, "temperature must be 0 \\(greedy\\) or positive"),
    (torch.tensor([[1, 2]]), {"temperature": float("nan")}, "temperature must be 0"),
    (torch.tensor([[1, 2]]), {"steps": -1}, "steps must be 0 or more"),
])
def test_generate_refuses_bad_input_with_one_message(rope_lm, prompt, kwargs, message):
    kwargs = {"steps": 2, **kwargs}
    with pytest.raises(LoweringError, match=message):
        rope_lm.generate(prompt, **kwargs)


def test_forward_refuses_out_of_vocabulary_ids_on_cpu(rope_lm):
    with pytest.raises(LoweringError, match="token id 99 is outside the vocabulary of model m"):
        rope_lm(torch.tensor([[1, 99]]))


def test_generate_samples_with_a_positive_temperature(rope_lm):
    g = torch.Generator().manual_seed(0)
    out = rope_lm.generate(torch.tensor([[1, 2]]), steps=5, temperature=1.0, generator=g)
    assert out.shape == (1, 7) and int(out.max()) < 50
