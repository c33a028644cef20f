"""Golden tests: a lowered mixer against a from-scratch float64 recomputation of its spec.

For each mixer family, `MixerModule(spec)`'s forward and the gradients of a random projection of
its output with respect to the input and to every parameter are compared with
`tests/oracles/mixer_from_scratch.py`, which shares no code with the lowering or the references.
Windows and chunks are small (8) so that, at T = 40, windows exclude keys, queries choose among
several chunks and the recurrent forms cross their chunk boundaries. Errors are norm-relative.
"""

from __future__ import annotations

import pytest
import torch

import seqdsl
from seqdsl.lower.mixer import MixerModule
from tests.oracles.mixer_from_scratch import mixer_oracle

D_MODEL = 16
T = 40
TOL = 1e-10  # float64 rounding over a few dozen steps, with a wide margin

SOFTMAX = "heads = 2  head_dim = 8"
MAMBA2 = ("head_dim = 8  expand = 2  key_dim = 16  qk_groups = 1  relation = dot(scale=1.0)  "
          "weights = linear  decay = data_dependent(scalar)  conv = causal(4)  norm = groupnorm  gate = swish")
GOLDEN_SPECS = {
    "transformer": f"{SOFTMAX}  position = rope",
    "window_8": f"{SOFTMAX}  position = rope  visibility = window(8)",
    "chunk_local_8": f"{SOFTMAX}  visibility = chunk_local(8)",
    "alibi": f"{SOFTMAX}  position = alibi",
    "temperature_0_5": f"{SOFTMAX}  position = rope  weights = softmax(temperature=0.5)",
    "scale_0": f"{SOFTMAX}  relation = dot(scale=0.0)",
    "scale_2_qk_norm": f"{SOFTMAX}  relation = dot(scale=2.0, qk_norm=true)",
    "random_keys": f"{SOFTMAX}  relation = random_keys(seed=3)",
    "const_keys": f"{SOFTMAX}  relation = const_keys",
    "positional": f"{SOFTMAX}  relation = positional",
    "softmax_decay": f"{SOFTMAX}  decay = data_dependent(scalar)",
    "top1_element": f"{SOFTMAX}  position = rope  select = top(1)",
    "top1_element_soft_values": f"{SOFTMAX}  select = top(1, value_grad=soft, grad=ste)  "
                                "weights = softmax(temperature=2.0)",
    "top1_element_no_grad": f"{SOFTMAX}  select = top(1, grad=none)",
    "top2_element_window": f"{SOFTMAX}  select = top(2)  visibility = window(8)",
    "top1_chunk_exact": f"{SOFTMAX}  position = rope  select = top(1, over=chunk(8))",
    "top1_chunk_exact_no_local": f"{SOFTMAX}  position = rope  select = top(1, over=chunk(8), local=false)",
    "top1_chunk_approx": f"{SOFTMAX}  position = rope  select = top(1, over=chunk(8), score=mean)",
    "top1_chunk_approx_no_local": f"{SOFTMAX}  select = top(1, over=chunk(8), score=mean, local=false)",
    "top1_chunk_lse_temperature": f"{SOFTMAX}  select = top(1, over=chunk(8), score=lse)  "
                                  "weights = softmax(temperature=0.5)",
    "top2_chunk_exact": f"{SOFTMAX}  select = top(2, over=chunk(8))",
    "top1_chunk_exact_no_grad": f"{SOFTMAX}  select = top(1, over=chunk(8), grad=none)",
    "top2_chunk_approx_sink3": f"{SOFTMAX}  select = top(2, over=chunk(8), score=mean, sink=3)",
    "top1_chunk_exact_no_local_sink10": f"{SOFTMAX}  select = top(1, over=chunk(8), local=false, sink=10)",
    "mamba2": MAMBA2,
    "mamba2_alibi": f"{MAMBA2}  position = alibi",
    "deltanet": "heads = 2  head_dim = 8  relation = dot(qk_norm=true)  weights = linear  update = delta  "
                "conv = causal(4)  norm = rmsnorm",
    "gated_deltanet": "heads = 2  head_dim = 8  weights = linear  update = delta  decay = data_dependent(scalar)  "
                      "conv = causal(4)  norm = rmsnorm  gate = swish",
    "gla": "heads = 2  head_dim = 16  key_dim = 8  weights = linear  decay = data_dependent(vector)  "
           "norm = rmsnorm  gate = swish",
    "mamba1": "head_dim = 1  expand = 2  key_dim = 4  qk_groups = 1  relation = dot(scale=1.0)  weights = linear  "
              "decay = data_dependent(selective)  conv = causal(4)  gate = swish",
    "mamba1_wide_heads_alibi": "heads = 2  head_dim = 3  key_dim = 4  qk_groups = 2  weights = linear  "
                               "decay = data_dependent(selective)  position = alibi",
    "rwkv6": "heads = 2  head_dim = 8  weights = linear  decay = data_dependent(vector)  update = additive(bonus=true)  "
             "conv = token_shift  norm = groupnorm  gate = sigmoid",
    "rwkv7": "heads = 2  head_dim = 8  relation = dot(scale=1.0)  weights = linear  decay = data_dependent(vector)  "
             "update = rwkv7  conv = token_shift  norm = groupnorm  gate = sigmoid",
    "retnet": "heads = 2  head_dim = 8  position = rope  weights = linear  decay = constant  norm = groupnorm  "
              "gate = swish",
    "linear_attention_normalized": "heads = 2  head_dim = 8  weights = normalized_linear  "
                                   "relation = dot(feature=elu1)  conv = causal(2)",
    "linear_attention_relu_scaled": "heads = 2  head_dim = 8  weights = linear  relation = dot(feature=relu, scale=0.5)",
}


def golden_module(body: str, seed: int = 0) -> MixerModule:
    """The mixer of `body`, in float64, with every parameter moved off its initial value (zeros
    and constants would hide a parameter used in the wrong place)."""
    mixer = seqdsl.loads(f"mixer m {{ {body} }}").program.mixer("m")
    torch.manual_seed(seed)
    module = MixerModule(mixer, D_MODEL, context=128).double()
    with torch.no_grad():
        for p in module.parameters():
            p.add_(0.3 * torch.randn_like(p))
    return module


def relative_error(got: torch.Tensor, want: torch.Tensor) -> float:
    """|got - want| / |want|; a gradient that is zero in exact arithmetic (const keys: every
    key scores alike, so the softmax's gradient sums to zero) is compared with |want| + 1e-3."""
    return float((got - want).norm() / (want.norm() + 1e-3))


def forward_and_gradients(fn, x: torch.Tensor, params: dict[str, torch.Tensor], probe: torch.Tensor):
    """fn(x) and the gradients of <fn(x), probe> with respect to x and every tensor in params."""
    x = x.detach().clone().requires_grad_(True)
    out = fn(x)
    names = [n for n, p in params.items() if p.requires_grad]
    grads = torch.autograd.grad((out * probe).sum(), [x] + [params[n] for n in names], allow_unused=True)
    return out.detach(), dict(zip(["input"] + names, grads))


def assert_matches_oracle(module: MixerModule, x: torch.Tensor, seed: int = 1) -> None:
    g = torch.Generator().manual_seed(seed)
    probe = torch.randn(x.shape, generator=g, dtype=torch.float64)
    params = dict(module.named_parameters())
    got, got_grads = forward_and_gradients(lambda t: module(t)[0], x, params, probe)
    weights = {n: t.detach().clone().requires_grad_(t.is_floating_point() and n in params)
               for n, t in module.state_dict().items()}
    want, want_grads = forward_and_gradients(
        lambda t: mixer_oracle(module.spec, weights, t, module.d_model), x, weights, probe)
    assert torch.isfinite(got).all(), "the lowering returned non-finite outputs"
    err = relative_error(got, want)
    assert err < TOL, f"forward differs from the oracle: {err:.2e}"
    assert set(got_grads) == set(want_grads)
    for name, want_g in want_grads.items():
        got_g = got_grads[name]
        want_g = torch.zeros_like(params.get(name, x)) if want_g is None else want_g
        got_g = torch.zeros_like(want_g) if got_g is None else got_g
        err = relative_error(got_g, want_g)
        assert err < TOL, f"gradient of {name} differs from the oracle: {err:.2e}"


@pytest.mark.parametrize("name", list(GOLDEN_SPECS))
def test_mixer_forward_and_gradients_equal_the_oracle(name):
    module = golden_module(GOLDEN_SPECS[name])
    x = torch.randn(2, T, D_MODEL, dtype=torch.float64, generator=torch.Generator().manual_seed(2))
    assert_matches_oracle(module, x)


@pytest.mark.parametrize("name", ["window_8", "top1_chunk_exact", "top1_chunk_approx_no_local", "mamba2",
                                  "gla", "rwkv7", "softmax_decay"])
def test_decoding_in_pieces_equals_the_oracle(name):
    """Prefill 13 tokens, then 3 at a time: pieces cross window and chunk boundaries."""
    module = golden_module(GOLDEN_SPECS[name])
    x = torch.randn(1, T, D_MODEL, dtype=torch.float64, generator=torch.Generator().manual_seed(4))
    with torch.no_grad():
        want = mixer_oracle(module.spec, module.state_dict(), x, D_MODEL)
        out, state = module(x[:, :13])
        pieces = [out]
        for t in range(13, T, 3):
            out, state = module(x[:, t:t + 3], state)
            pieces.append(out)
    err = relative_error(torch.cat(pieces, dim=1), want)
    assert err < TOL, f"decoding differs from the oracle: {err:.2e}"


def test_the_chunk_specs_give_queries_several_candidate_chunks():
    """Guard on the test sizes: at T = 40 with chunks of 8 the last query chooses among 4 chunks."""
    assert (T - 1) // 8 >= 4
