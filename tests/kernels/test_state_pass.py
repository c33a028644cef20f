"""The state-passing kernel (kernels/state_pass.py) against the chunked reference's loop
(seqdsl/reference/recurrent.py: `affine_states`): the states and the gradients of the
transitions, writes and initial state, under the interpreter on CPU and compiled on a GPU; the
chunked delta rule with the kernel against the one without; the ops' fakes; the self-check the
planner runs (`triton.delta_chunk`), which must also fail on a wrong kernel."""

from __future__ import annotations

import dataclasses

import pytest
import torch
from hypothesis import given
from hypothesis import strategies as st

from seqdsl.ir import support
from seqdsl.ir.key import kernel_key
from seqdsl.kernels import state_pass
from seqdsl.lower.backends import triton as triton_backend
from seqdsl.lower.inputs import RecurrentInputs
from seqdsl.reference.recurrent import affine_states, chunked_ref, recurrent_ref
from seqdsl import custom_ops
from tests.ir.test_support import _own_mixers
from tests.kernels.test_top1_kernels import FAST
from tests.lower.test_parameters_reach_every_path import kernels_on_cpu
from tests.spec_library import SPECS_DIR

ON_GPU = pytest.mark.skipif(not torch.cuda.is_available() or kernels_on_cpu(), reason="needs a CUDA device")


def walk_inputs(lead: tuple[int, ...], N: int, Dk: int, Dv: int, dtype: torch.dtype, device: str = "cpu",
                seed: int = 0) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    """Transitions near a delta rule's, a decay on the diagonal less a rank-one removal (their
    norms stay about 1, so the states neither vanish nor blow up over the chunks), writes and a
    state."""
    g = torch.Generator().manual_seed(seed)
    rnd = lambda *shape: torch.randn(*shape, generator=g, dtype=torch.float64)
    k = torch.nn.functional.normalize(rnd(*lead, N, Dk, 1), dim=-2)
    decay = torch.rand(*lead, N, Dk, generator=g, dtype=torch.float64) * 0.5 + 0.5
    M = torch.diag_embed(decay) - 0.5 * k @ k.transpose(-1, -2) + 0.05 * rnd(*lead, N, Dk, Dk)
    to = lambda t: t.to(device=device, dtype=dtype)
    return to(M), to(rnd(*lead, N, Dk, Dv)), to(rnd(*lead, Dk, Dv))


def rel(x: torch.Tensor, y: torch.Tensor) -> float:
    return ((x.double() - y.double()).norm() / y.double().norm()).item()


def walk_errors(walk, M, b, S0) -> dict[str, float]:
    """Norm-relative errors of `walk`'s states and of all three gradients against the float64
    loop, for one cotangent."""
    leaves = [t.detach().requires_grad_() for t in (M, b, S0)]
    got = walk(*leaves)
    ref_leaves = [t.detach().double().requires_grad_() for t in (M, b, S0)]
    want = affine_states(*ref_leaves)
    cotangent = torch.randn(want.shape, generator=torch.Generator().manual_seed(1), dtype=torch.float64)
    got.backward(cotangent.to(got))
    want.backward(cotangent.to(want.device))
    return {"states": rel(got, want), **{f"d{name}": rel(x.grad, y.grad)
                                         for name, x, y in zip(("M", "b", "S0"), leaves, ref_leaves)}}


def assert_walk_matches(M, b, S0, tol: float) -> None:
    errors = walk_errors(state_pass.affine_states, M, b, S0)
    assert all(err <= tol for err in errors.values()), errors


@FAST
@given(lead=st.sampled_from([(1,), (3,), (2, 2)]), N=st.sampled_from([1, 2, 5]),
       widths=st.sampled_from([(16, 16), (16, 32), (32, 16), (16, 64)]),
       dtype=st.sampled_from([torch.float32, torch.float64]))
def test_the_state_walk_matches_the_loop(lead, N, widths, dtype):
    Dk, Dv = widths
    assert_walk_matches(*walk_inputs(lead, N, Dk, Dv, dtype), tol=1e-5 if dtype == torch.float32 else 1e-12)


def test_the_adjoint_walk_reads_the_transitions_transposed_and_in_reverse():
    """A[N] = dS[N], A[n] = M[n]^T A[n+1] + dS[n], written out for three chunks: a walk that
    read M untransposed or in forward order would differ (the transitions are not symmetric)."""
    M, dS, _ = walk_inputs((1,), 3, 16, 16, torch.float64, seed=3)
    dS = torch.randn(1, 4, 16, 16, generator=torch.Generator().manual_seed(4), dtype=torch.float64)
    A = state_pass._adjoint(M, dS)
    a3 = dS[:, 3]
    a2 = M[:, 2].transpose(-1, -2) @ a3 + dS[:, 2]
    a1 = M[:, 1].transpose(-1, -2) @ a2 + dS[:, 1]
    a0 = M[:, 0].transpose(-1, -2) @ a1 + dS[:, 0]
    torch.testing.assert_close(A, torch.stack([a0, a1, a2, a3], dim=1), rtol=1e-12, atol=1e-12)


def test_the_state_walk_ops_pass_opcheck():
    """torch.compile traces the ops with their fake implementations; autograd through them."""
    M, b, S0 = walk_inputs((2,), 3, 16, 32, torch.float32)
    torch.library.opcheck(custom_ops.op("affine_states"), (M.requires_grad_(), b.requires_grad_(),
                                                                    S0.requires_grad_()))
    torch.library.opcheck(custom_ops.op("affine_states_adjoint"),
                          (M.detach(), torch.randn(2, 4, 16, 32)))


def test_the_state_walk_refuses_widths_that_are_not_whole_tiles_and_mixed_dtypes():
    with pytest.raises(ValueError, match="state widths 16x48"):
        state_pass.affine_states(*walk_inputs((1,), 2, 16, 48, torch.float32))
    M, b, S0 = walk_inputs((1,), 2, 16, 16, torch.float32)
    with pytest.raises(ValueError, match="one dtype"):
        state_pass.affine_states(M, b, S0.double())


def delta_inputs(T: int, K: int, V: int, decay: str, seed: int = 0) -> dict:
    g = torch.Generator().manual_seed(seed)
    rnd = lambda *shape: torch.randn(*shape, generator=g, dtype=torch.float64)
    B, H = 1, 2
    log_decay = None
    if decay != "none":
        log_decay = -torch.rand(B, T, H, *((K,) if decay == "vector" else ()), generator=g,
                                dtype=torch.float64) * 0.5
    return dict(q=rnd(B, T, H, K) * K ** -0.5, k=torch.nn.functional.normalize(rnd(B, T, H, K), dim=-1),
                v=rnd(B, T, H, V), log_decay=log_decay, beta=torch.sigmoid(rnd(B, T, H)),
                initial_state=rnd(B, H, K, V) * 0.1)


def errors_against_the_rule(inputs: dict, products: torch.dtype | None = None) -> dict[str, float]:
    """The chunked delta rule with the kernel (chunks of 16, `products` as given) on float32
    copies of `inputs`, against `recurrent_ref` (the definition) in float64: norm-relative errors
    of the output, the final state and every input's gradient, for one fixed cotangent."""
    names = [name for name, t in inputs.items() if t is not None]
    leaves = {name: t.detach().float().requires_grad_() if t is not None else None for name, t in inputs.items()}
    ref_leaves = {name: t.detach().clone().requires_grad_() if t is not None else None
                  for name, t in inputs.items()}
    o, S = chunked_ref(**leaves, update="delta", chunk_size=16, walk=state_pass.affine_states, products=products)
    o_ref, S_ref = recurrent_ref(**ref_leaves, update="delta")
    g = torch.Generator().manual_seed(5)
    do, dS = (torch.randn(t.shape, generator=g, dtype=torch.float64) for t in (o_ref, S_ref))
    torch.autograd.backward([o, S], [do.to(o.dtype), dS.to(S.dtype)])
    torch.autograd.backward([o_ref, S_ref], [do, dS])
    return {"output": rel(o, o_ref), "state": rel(S, S_ref),
            **{f"d{name}": rel(leaves[name].grad, ref_leaves[name].grad) for name in names}}


@pytest.mark.parametrize("decay", ["none", "scalar", "vector"])
def test_the_chunked_delta_rule_with_the_kernel_matches_the_step_by_step_rule(decay):
    """Three chunks of 16 and a partial fourth, against `recurrent_ref` (the definition):
    outputs, final state and every input's gradient."""
    errors = errors_against_the_rule(delta_inputs(53, 16, 32, decay))
    assert all(err <= 1e-5 for err in errors.values()), errors


@pytest.mark.parametrize("decay", ["none", "scalar", "vector"])
def test_the_chunked_delta_rule_with_bf16_products_stays_within_bf16_of_the_rule(decay):
    """`products=bf16` (what `triton.delta_chunk` runs under autocast): within bf16's reach of the
    definition (its rounding is 2^-8 of an entry), and really in bf16: further from it than the
    float32 form by more than float32 can be."""
    inputs = delta_inputs(53, 16, 32, decay)
    low, full = errors_against_the_rule(inputs, torch.bfloat16), errors_against_the_rule(inputs)
    assert all(err <= 2e-2 for err in low.values()), low
    assert all(low[name] > 10 * full[name] for name in low), (low, full)


def test_lower_precision_products_are_refused_outside_the_delta_rule():
    inputs = delta_inputs(20, 16, 16, "scalar")
    del inputs["beta"]
    with pytest.raises(ValueError, match="delta rule only"):
        chunked_ref(**inputs, update="additive", products=torch.bfloat16)


def test_the_path_multiplies_in_the_values_16_bit_dtype_and_keeps_float32_whole():
    inputs = lambda dtype: RecurrentInputs(q=torch.zeros(1, 4, 2, 16), k=torch.zeros(1, 4, 2, 16),
                                           v=torch.zeros(1, 4, 2, 16, dtype=dtype))
    assert triton_backend.delta_chunk_products(inputs(torch.bfloat16)) == torch.bfloat16
    assert triton_backend.delta_chunk_products(inputs(torch.float16)) == torch.float16
    assert triton_backend.delta_chunk_products(inputs(torch.float32)) is None
    assert triton_backend.delta_chunk_products(inputs(torch.float64)) is None


def gated_deltanet_key(**changes):
    """The library's Gated DeltaNet key (110m: 12 heads, 64-wide), with `changes`."""
    _, model, mixers = _own_mixers(SPECS_DIR / "gated_deltanet.seq")
    return dataclasses.replace(kernel_key(mixers[0], model.d_model), **changes)


def test_gated_deltanet_is_offered_to_the_kernel():
    assert support.triton_recurrent(gated_deltanet_key()).op == triton_backend.DELTA_CHUNK


@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16])
def test_the_planners_self_check_passes_the_kernel(dtype):
    key = gated_deltanet_key(key_dim=16, head_dim=16, value_cols=16)
    assert triton_backend.delta_chunk_self_check(key, dtype, torch.device("cpu")) == (True, "")


def test_the_planners_self_check_fails_a_wrong_kernel(monkeypatch):
    """A walk that drops the last chunk's write: the self-check names what differs."""
    right = state_pass.affine_states

    def wrong(M, b, S0):
        return right(M, torch.cat([b[..., :-1, :, :], torch.zeros_like(b[..., -1:, :, :])], dim=-3), S0)

    monkeypatch.setattr(state_pass, "affine_states", wrong)
    key = gated_deltanet_key(key_dim=16, head_dim=16, value_cols=16)
    ok, detail = triton_backend.delta_chunk_self_check(key, torch.float32, torch.device("cpu"))
    assert not ok and "differs from the reference" in detail


# --- on a GPU, compiled: Gated DeltaNet's shapes at 110m (batch 16 x 12 heads, 32 chunks of 64) -----


@pytest.mark.parametrize("widths", [(64, 64), (128, 128), (32, 64)])
@pytest.mark.gpu
@ON_GPU
def test_the_state_walk_on_gpu_at_training_shapes(widths, monkeypatch):
    monkeypatch.setattr(torch.backends.cuda.matmul, "allow_tf32", False)
    Dk, Dv = widths
    assert_walk_matches(*walk_inputs((16, 12), 32, Dk, Dv, torch.float32, "cuda"), tol=1e-5)


@pytest.mark.parametrize("widths", [(64, 64), (128, 128)])
@pytest.mark.gpu
@ON_GPU
def test_the_state_walk_with_tf32_allowed_is_closer_than_the_loop(widths, monkeypatch):
    """With TF32 allowed (seqdsl train's default) the loop's cuBLAS matmuls round their inputs
    to 10 mantissa bits (4.4e-4 of the states' norm from float64 over 32 chunks of 64-wide
    products on an H100); the kernel's three-product TF32 may not drift further. (Plain TF32 in
    the kernel drifted 6x further: its TF32 drops the low bits, cuBLAS rounds them.)"""
    monkeypatch.setattr(torch.backends.cuda.matmul, "allow_tf32", True)
    inputs = walk_inputs((16, 12), 32, *widths, torch.float32, "cuda")
    kernel, loop = walk_errors(state_pass.affine_states, *inputs), walk_errors(affine_states, *inputs)
    assert all(kernel[name] <= loop[name] for name in kernel), (kernel, loop)


@pytest.mark.gpu
@ON_GPU
def test_the_state_walk_on_gpu_in_float64():
    assert_walk_matches(*walk_inputs((4,), 8, 64, 64, torch.float64, "cuda"), tol=1e-12)


@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16])
@pytest.mark.gpu
@ON_GPU
def test_the_planners_self_check_passes_on_gpu(dtype):
    assert triton_backend.delta_chunk_self_check(gated_deltanet_key(), dtype, torch.device("cuda")) == (True, "")
