"""The causal conv kernel (kernels/causal_conv.py) against the reference taps
(seqdsl/reference/conv.py) in float64: y and the gradients of u and of the weight, under the
interpreter on CPU and compiled on a GPU; the ops' fakes; the self-check the planner runs
(`triton.causal_conv`), which must also fail on a wrong kernel; and the path itself
(seqdsl/lower/conv_path.py): what it plans where, which calls take the kernel, the carried
inputs, a model on the kernel against the same model on the reference."""

from __future__ import annotations

import os
from unittest import mock

import pytest
import torch
from hypothesis import given
from hypothesis import strategies as st

import seqdsl
from seqdsl import custom_ops
from seqdsl.ir import support
from seqdsl.kernels import causal_conv, launch
from seqdsl.lower import conv_path
from seqdsl.lower.backends.base import BackendName, Plan
from seqdsl.lower.lm import build_lm
from seqdsl.lower.paths import set_path
from seqdsl.reference.conv import causal_conv_silu, last_inputs
from tests.kernels.gpu_compile import compile_all, record
from tests.kernels.test_top1_kernels import FAST
from tests.lower.test_parameters_reach_every_path import kernels_on_cpu
from tests.spec_library import SPECS_DIR

ON_GPU = pytest.mark.skipif(not torch.cuda.is_available() or kernels_on_cpu(), reason="needs a CUDA device")


def conv_errors(B: int, T: int, C: int, S: int, dtype: torch.dtype, device: str = "cpu",
                seed: int = 0) -> dict[str, float]:
    """Norm-relative errors of the kernel's y, du and dw against the float64 reference, for
    inputs drawn in `dtype` and one cotangent."""
    g = torch.Generator().manual_seed(seed)
    u = torch.randn(B, T, C, generator=g).to(device=device, dtype=dtype)
    w = (torch.randn(C, S, generator=g) / S).to(device)
    dy = torch.randn(B, T, C, generator=g).to(dtype).double().to(device)  # exact in `dtype`: y's cotangent
    leaves = [u.requires_grad_(), w.requires_grad_()]
    got = causal_conv.causal_conv_silu(*leaves)
    got.backward(dy.to(got.dtype))
    ref = [t.detach().double().requires_grad_() for t in leaves]
    want, _ = causal_conv_silu(*ref)
    want.backward(dy)
    rel = lambda x, y: ((x.double() - y).norm() / y.norm()).item()
    return {"y": rel(got, want), "du": rel(leaves[0].grad, ref[0].grad), "dw": rel(leaves[1].grad, ref[1].grad)}


@FAST
@given(B=st.sampled_from([1, 2]), T=st.sampled_from([1, 2, 3, 15, 16, 17, 40, 70]),
       C=st.sampled_from([1, 5, 16, 33]), S=st.integers(1, 6))
# sequences shorter than the taps, one token, a partial last tile and backward span (16 rows and
# 32 under the interpreter), channels past a block
def test_kernel_matches_reference(B, T, C, S):
    errors = conv_errors(B, T, C, S, torch.float32)
    assert max(errors.values()) < 1e-5, errors


def test_kernel_in_bfloat16_rounds_once():
    """y and du come back in bf16: their error is one rounding (2^-9 relative, about 2e-3 in
    norm); dw is summed in float32 and returned in the weight's float32."""
    errors = conv_errors(2, 45, 24, 4, torch.bfloat16)
    assert errors["y"] < 4e-3 and errors["du"] < 4e-3 and errors["dw"] < 1e-5, errors


def test_the_longest_filter_is_taken_and_a_longer_one_refused():
    assert support.causal_conv(support.CONV_MAX_TAPS).ok
    refused = support.causal_conv(support.CONV_MAX_TAPS + 1)
    assert not refused.ok and "taps" in refused.reason and refused.slot == ("conv", "size")
    errors = conv_errors(1, 40, 8, support.CONV_MAX_TAPS, torch.float32)
    assert max(errors.values()) < 1e-5, errors
    with pytest.raises(ValueError, match="taps"):
        causal_conv.forward(torch.zeros(1, 4, 3), torch.zeros(3, support.CONV_MAX_TAPS + 1))


def test_the_conv_ops_pass_opcheck():
    g = torch.Generator().manual_seed(0)
    u, w = torch.randn(2, 19, 6, generator=g), torch.randn(6, 4, generator=g)
    torch.library.opcheck(custom_ops.op("causal_conv_silu"), (u.requires_grad_(), w.requires_grad_()))
    torch.library.opcheck(custom_ops.op("causal_conv_silu_backward"), (u.detach(), w.detach(), torch.randn_like(u)))


def test_last_inputs_are_what_the_reference_carries():
    g = torch.Generator().manual_seed(0)
    for T in (1, 2, 3, 7):
        for past in (None, torch.randn(2, 3, 5, generator=g)):
            u, w = torch.randn(2, T, 5, generator=g), torch.randn(5, 4, generator=g)
            full = torch.cat([past if past is not None else torch.zeros(2, 3, 5), u], dim=1)
            assert torch.equal(last_inputs(u, past, 4), full[:, -3:])
            assert torch.equal(causal_conv_silu(u, w, past)[1], full[:, -3:])


@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16])
def test_the_planners_self_check_passes_the_kernel(dtype):
    assert conv_path.self_check(4, 24, dtype, torch.device("cpu")) == (True, "")


def test_the_planners_self_check_fails_a_wrong_kernel(monkeypatch):
    right = causal_conv.backward
    # taps read one step late in the backward: du off by one position
    monkeypatch.setattr(causal_conv, "backward", lambda u, w, dy: (lambda du, dw: (du.roll(1, 1), dw))(*right(u, w, dy)))
    ok, detail = conv_path.self_check(4, 24, torch.float32, torch.device("cpu"))
    assert not ok and detail.startswith("du differs"), detail


# --- the path ------------------------------------------------------------------------------------------


def test_the_path_is_the_reference_off_cuda_and_when_forced(monkeypatch):
    path = conv_path.ConvPath(4, 24, "m")
    plan = path.plan("cpu", torch.float32)
    assert plan.backend is BackendName.REFERENCE and "CUDA only" in plan.reason
    assert conv_path.ConvPath(17, 24, "m").plan("cuda").reason.startswith("a causal conv of 17 taps")
    monkeypatch.setenv("SEQDSL_PATH", "reference")
    assert conv_path.ConvPath(4, 24, "m").plan("cuda", torch.bfloat16).reason == "forced"


def test_on_cuda_the_plan_is_the_kernel_in_the_dtypes_it_takes():
    path = conv_path.ConvPath(4, 24, "m")
    plan = path.plan("cuda")  # static facts only: no self-check, no GPU needed
    assert plan.op == conv_path.OP and "after a self-check" in plan.reason
    assert path.plan("cuda", torch.float64).backend is BackendName.REFERENCE


def _kernel_planned(path: conv_path.ConvPath, dtype: torch.dtype) -> None:
    """Plan the kernel on CPU (the interpreter runs it), as a GPU's passed self-check would."""
    path._plans[("cpu", dtype)] = Plan(BackendName.TRITON, conv_path.OP, "test: the interpreter")


def test_the_kernel_runs_from_position_0_and_a_call_with_a_past_runs_the_reference(monkeypatch):
    path = conv_path.ConvPath(4, 6, "m")
    _kernel_planned(path, torch.float32)
    calls = []
    monkeypatch.setattr(causal_conv, "causal_conv_silu", lambda u, w: calls.append(u.shape) or causal_conv_silu(u, w)[0])
    g = torch.Generator().manual_seed(0)
    u, w = torch.randn(2, 9, 6, generator=g), torch.randn(6, 4, generator=g)
    y, tail = path(u, w, None)
    assert calls == [u.shape]
    want, want_tail = causal_conv_silu(u, w)
    assert torch.equal(y, want) and torch.equal(tail, want_tail)
    step = torch.randn(2, 1, 6, generator=g)
    y1, tail1 = path(step, w, tail)  # decoding: the reference, with the carried inputs
    assert calls == [u.shape]
    assert torch.allclose(y1, causal_conv_silu(torch.cat([u, step], 1), w)[0][:, -1:]) and tail1.shape == (2, 3, 6)
    path.planning_only = True
    path(u, w, None)
    assert calls == [u.shape]  # planning's throwaway forward never launches the kernel


def test_a_model_on_the_conv_kernel_equals_the_model_on_the_reference():
    """Mamba-2's spec at a tiny width: logits and every parameter's gradient with the conv on the
    kernel (interpreter) against all-reference."""
    program = seqdsl.load(SPECS_DIR / "mamba2.seq").program
    torch.manual_seed(0)
    lm = build_lm(program, preset="tiny")
    tokens = torch.randint(0, lm.spec.vocab, (2, 21), generator=torch.Generator().manual_seed(1))
    runs = []
    for kernel in (False, True):
        set_path(lm, "reference")
        if kernel:
            for mixer in lm.mixers():
                mixer.conv_path.force = None
                _kernel_planned(mixer.conv_path, torch.float32)
        lm.zero_grad()
        logits, _ = lm(tokens)
        logits.float().square().mean().backward()
        runs.append((logits.detach(), {n: p.grad.clone() for n, p in lm.named_parameters() if p.grad is not None}))
    (ref_logits, ref_grads), (got_logits, got_grads) = runs
    assert torch.allclose(got_logits, ref_logits, atol=1e-5, rtol=1e-5)
    assert ref_grads.keys() == got_grads.keys() and any("conv_weight" in n for n in got_grads)
    for name in ref_grads:
        assert torch.allclose(got_grads[name], ref_grads[name], atol=1e-5, rtol=1e-4), name


@pytest.mark.skipif(os.environ.get("TRITON_INTERPRET") != "1", reason="a GPU run compiles every kernel it launches")
def test_the_conv_kernels_compile_for_sm90():
    """The launches of a forward and backward (GPU tile sizes; float32 and bf16; 4 and 3 taps)
    through Triton's compiler for Hopper, as tests/kernels/test_compile_for_gpu.py does for the
    generated kernels: the interpreter accepts programs the compiler refuses."""
    launches: list[dict] = []
    launch.interpreted()
    with record(launches), mock.patch.object(launch, "interpreted", lambda: False):
        for dtype, S in ((torch.float32, 4), (torch.bfloat16, 4), (torch.float32, 3)):
            conv_errors(1, 40, 20, S, dtype)
    assert {entry["name"] for entry in launches} == {"_forward", "_gate_backward", "_input_backward"}
    result = compile_all(launches)
    assert not result["failed"], "\n\n".join(f"{f['name']} {f['constants']}:\n{f['error']}" for f in result["failed"])
    assert result["compiled"] == len(launches) == 9


# --- on a GPU ---------------------------------------------------------------------------------------


@ON_GPU
@pytest.mark.gpu
@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16])
def test_kernel_matches_reference_on_gpu_at_mamba2s_shape(dtype):
    """Mamba-2's conv at the 110m preset (1,792 channels, 4 taps), 2 x 2048 tokens (several
    backward spans), and an odd length."""
    for T in (2048, 1000):
        errors = conv_errors(2, T, 1792, 4, dtype, device="cuda")
        bound = 1e-5 if dtype == torch.float32 else 4e-3
        assert errors["y"] < bound and errors["du"] < bound and errors["dw"] < 1e-5, (T, errors)


@ON_GPU
@pytest.mark.gpu
@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16])
def test_the_planners_self_check_passes_on_gpu(dtype):
    assert conv_path.self_check(4, 1792, dtype, torch.device("cuda")) == (True, "")
