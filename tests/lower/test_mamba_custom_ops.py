"""The custom ops around mamba-ssm's kernels (seqdsl::mamba_ssd, seqdsl::mamba_selective_scan and
their backward ops), on CPU, with test oracles standing in for the CUDA kernels: the ops' schemas,
fake (meta) implementations and autograd registrations agree with what they run
(`torch.library.opcheck`), and a function calling them compiles as one graph whose outputs and
gradients equal the eager call's. The kernels themselves run on a GPU only
(tests/lower/test_gpu_mamba.py); a compiled model on them is in tests/lower/test_gpu_mamba.py too.

Stand-ins: for the SSD, the reference in mamba's layout (mamba_ssd.reference) and its autograd
gradient; for the selective scan, Mamba-1's published scan (tests/oracles/selective_scan.py), with
the extension's layout of its saved states x (B, D, chunks, 2K), the last state at x[:, :, -1, 1::2].
"""

from __future__ import annotations

import math
import types

import pytest
import torch
import torch._dynamo

from seqdsl.lower.backends import mamba_ssd
from seqdsl.lower.backends import mamba_scan as scan_paths
from seqdsl import custom_ops
from tests.oracles.selective_scan import selective_scan_loop


def _kept_stand_in(x, Bm, chunk):
    """What the stand-in forward keeps for the backward: distinct values in the kept shapes, so
    that the backward can tell it got them."""
    return tuple(torch.arange(math.prod(shape), dtype=torch.float32).reshape(shape)
                 for shape in mamba_ssd.kept_shapes(x, Bm, chunk))


def _ssd_stand_in_forward(x, log_decay, Bm, Cm, init, chunk):
    o, final = mamba_ssd.reference(x, log_decay, Bm, Cm, init)
    # mamba's layout: contiguous
    return (o.to(x.dtype).contiguous(), final.float().contiguous(), *_kept_stand_in(x, Bm, chunk))


def _ssd_stand_in_backward(x, log_decay, Bm, Cm, init, states, CB, dout, dfinal, chunk):
    for got, kept in zip((states, CB), _kept_stand_in(x, Bm, chunk)):
        assert torch.equal(got, kept), "the backward did not get what the forward kept"
    # torch.func, not torch.autograd: a custom op's implementation runs below the autograd keys
    present = [t for t in (x, log_decay, Bm, Cm, init) if t is not None]

    def call(*args):
        it = iter(args)
        return mamba_ssd.reference(*(None if t is None else next(it) for t in (x, log_decay, Bm, Cm, init)))

    _, vjp = torch.func.vjp(call, *present)
    grads = iter(vjp((dout, dfinal)))
    return tuple(x.new_empty(0, dtype=torch.float32) if t is None else next(grads).contiguous()
                 for t in (x, log_decay, Bm, Cm, init))


@pytest.fixture
def ssd_stand_in(monkeypatch):
    monkeypatch.setattr(mamba_ssd, "_forward", _ssd_stand_in_forward)
    monkeypatch.setattr(mamba_ssd, "_backward", _ssd_stand_in_backward)


def _ssd_inputs(decay: bool, init: bool, T: int = 11):
    g = torch.Generator().manual_seed(0)
    rnd = lambda *s: torch.randn(*s, generator=g)
    B, H, G, K, V = 2, 4, 2, 3, 5
    return [rnd(B, T, H, V), -torch.rand(B, T, H, generator=g) * 0.5 if decay else None,
            rnd(B, T, G, K), rnd(B, T, G, K) * 0.5, rnd(B, H, V, K) * 0.1 if init else None]


def _grads(fn, inputs):
    leaves = [None if t is None else t.clone().requires_grad_() for t in inputs]
    o, final = fn(*leaves)
    (o.square().sum() + final.square().sum()).backward()
    return [o.detach(), final.detach()] + [t.grad for t in leaves if t is not None]


@pytest.mark.parametrize("decay,init", [(True, True), (False, False)], ids=["decay_and_state", "neither"])
def test_the_ssd_op_passes_opcheck(ssd_stand_in, decay, init):
    inputs = [None if t is None else t.requires_grad_() for t in _ssd_inputs(decay, init)]
    torch.library.opcheck(custom_ops.op("mamba_ssd"), (*inputs, mamba_ssd.CHUNK))


@pytest.mark.parametrize("decay,init", [(True, True), (False, False)], ids=["decay_and_state", "neither"])
def test_the_ssd_op_compiles_as_one_graph_with_the_reference_gradients(ssd_stand_in, decay, init):
    torch._dynamo.reset()
    inputs = _ssd_inputs(decay, init)
    compiled = torch.compile(mamba_ssd.ssd, fullgraph=True, backend="aot_eager")
    got, want = _grads(compiled, inputs), _grads(mamba_ssd.reference, inputs)
    assert len(got) == len(want) == 2 + 3 + decay + init
    for x, y in zip(got, want):
        assert torch.allclose(x, y, rtol=1e-5, atol=1e-6)


def test_the_ssd_op_differentiates_an_output_alone_and_keeps_no_gradient_for_what_it_kept(ssd_stand_in):
    """Training uses o and not the final state: the backward makes the final state's zero
    gradient itself (autograd materialises none: the kept outputs would cost 130 MB a layer);
    the kept states and CB are not differentiable."""
    inputs = _ssd_inputs(True, True)
    leaves = [t.clone().requires_grad_() for t in inputs]
    o, final, *kept = custom_ops.op("mamba_ssd")(*leaves, mamba_ssd.CHUNK)
    assert not any(t.requires_grad for t in kept)
    o.square().sum().backward()
    want = [t.clone().requires_grad_() for t in inputs]
    mamba_ssd.reference(*want)[0].square().sum().backward()
    for got, ref in zip(leaves, want):
        assert torch.allclose(got.grad, ref.grad, rtol=1e-5, atol=1e-6)


class _ExtensionStandIn(types.SimpleNamespace):
    """selective_scan_cuda's fwd and bwd, as mamba-ssm calls them (no D, z, delta_bias)."""

    @staticmethod
    def fwd(u, delta, A, B, C, D, z, delta_bias, softplus):
        y, last = selective_scan_loop(u, delta, A, B, C)
        x = u.new_zeros(u.shape[0], u.shape[1], -(-u.shape[2] // scan_paths.SCAN_CHUNK), 2 * A.shape[-1])
        x[:, :, -1, 1::2] = last.detach()  # the extension's last state: no gradient
        return y.detach(), x

    @staticmethod
    def bwd(u, delta, A, B, C, D, z, delta_bias, dout, x, out, dz, softplus, recompute):
        _, vjp = torch.func.vjp(lambda *args: selective_scan_loop(*args)[0], u, delta, A, B, C)
        return (*vjp(dout), None, None)


@pytest.fixture
def scan_stand_in(monkeypatch):
    monkeypatch.setattr(scan_paths, "_cuda", lambda: _ExtensionStandIn())


def _scan_inputs(T: int = 13):
    g = torch.Generator().manual_seed(1)
    rnd = lambda *s: torch.randn(*s, generator=g)
    B, D, G, K = 2, 6, 2, 4
    delta = torch.nn.functional.softplus(rnd(B, D, T) - 2.0)
    A = -torch.arange(1, K + 1, dtype=torch.float32).expand(D, K) * torch.rand(D, 1, generator=g)
    return [rnd(B, D, T), delta, A.contiguous(), rnd(B, G, K, T), rnd(B, G, K, T)]


def test_the_selective_scan_op_passes_opcheck(scan_stand_in):
    inputs = tuple(t.requires_grad_() for t in _scan_inputs(T=scan_paths.SCAN_CHUNK + 3))  # two state chunks
    torch.library.opcheck(custom_ops.op("mamba_selective_scan"), inputs)


def test_the_selective_scan_op_compiles_as_one_graph_with_the_oracle_gradients(scan_stand_in):
    torch._dynamo.reset()
    inputs = _scan_inputs()
    compiled = torch.compile(scan_paths.selective_scan, fullgraph=True, backend="aot_eager")

    # the extension's stand-in gives the last state no gradient, as mamba's: the op adds it
    got, want = _grads(compiled, inputs), _grads(selective_scan_loop, inputs)
    assert len(got) == 2 + 5
    for x, y in zip(got, want):
        assert torch.allclose(x, y, rtol=1e-5, atol=1e-6)
