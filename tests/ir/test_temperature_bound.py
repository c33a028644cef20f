"""The IR's lower bound on softmax temperatures (fixed, and a `learned` initial value):
`seqdsl/ir/nodes.py: MIN_TEMPERATURE`. Below it the spec is refused with one located message
naming the bound and the reason; at the bound the lowered mixer stays finite in float32 and
bfloat16, forward and backward."""

from __future__ import annotations

from pathlib import Path

import pytest
import torch

import seqdsl
from seqdsl.errors import SeqError
from seqdsl.ir import nodes


def mixer_with(weights: str) -> str:
    return f"mixer f {{ heads = 2  head_dim = 16  weights = {weights} }}"


@pytest.mark.parametrize("weights", ["softmax(temperature = 1e-300)", "softmax(temperature = 1e-7)",
                                     "softmax(temperature = learned(1e-300))",
                                     "softmax(temperature = 0)", "softmax(temperature = learned(0))"])
def test_temperatures_below_the_bound_are_refused_with_the_bound_and_why(weights):
    with pytest.raises(SeqError) as err:
        seqdsl.loads(mixer_with(weights))
    message = str(err.value)
    assert "must be at least 1e-06" in message
    assert "float32/bfloat16" in message and "overflow" in message
    assert "1:" in message.splitlines()[0]  # located at the temperature in the source


def test_the_bound_is_one_constant_and_the_grammar_reference_lists_it():
    assert nodes.MIN_TEMPERATURE == 1e-6
    text = (Path(__file__).resolve().parents[2] / "grammar" / "README.md").read_text()
    assert "`temperature`: number >= 1e-06" in text
    assert "`init` (positional): number >= 1e-06" in text


@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16])
@pytest.mark.parametrize("weights", ["softmax(temperature = 1e-6)", "softmax(temperature = learned(1e-6))"])
def test_a_mixer_at_the_bound_stays_finite_forward_and_backward(weights, dtype):
    from seqdsl.lower.mixer import MixerModule

    torch.manual_seed(0)
    m = MixerModule(seqdsl.loads(mixer_with(weights)).program.mixers[-1], 32).to(dtype)
    x = torch.randn(2, 12, 32, dtype=dtype, requires_grad=True)
    out = m(x)[0]
    out.float().square().sum().backward()
    assert torch.isfinite(out).all()
    assert torch.isfinite(x.grad).all()
    assert all(torch.isfinite(p.grad).all() for p in m.parameters() if p.grad is not None)
