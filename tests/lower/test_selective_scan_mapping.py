"""The selective-scan path's mapping (seqdsl/lower/backends/mamba_scan.py), on CPU: the arguments
it gives mamba-ssm's `selective_scan_fn`, run through Mamba-1's published selective scan
(tests/oracles/selective_scan.py), reproduce the reference's selective step
(`seqdsl.reference.recurrent.selective_to_additive` then rule (1)) in float64; and the path's own
work around the scan (an initial state) is exact, with the oracle standing in for the kernel.
The last state's gradient, which mamba's scan lacks, is the custom op's (test_mamba_custom_ops.py).
The kernel itself runs on a GPU only: tests/lower/test_gpu_mamba.py compares it with the reference."""

from __future__ import annotations

import pytest
import torch

from seqdsl.lower.backends import mamba_scan as paths
from seqdsl.lower.inputs import RecurrentInputs
from seqdsl.reference.recurrent import chunked_ref, recurrent_ref, selective_to_additive
from tests.oracles.selective_scan import selective_scan_loop
from tests.oracles.ssd_loops import state_update

H, G, K = 4, 2, 5


def _inputs(T: int, V: int):
    """Float32 values held in float64 (the path hands mamba float32): q and k shared within each
    of G groups, step sizes around Mamba-1's initial ones, S4D-real rates, a state."""
    g = torch.Generator().manual_seed(3)
    rnd = lambda *s: torch.randn(*s, generator=g).double()
    grouped = lambda: rnd(2, T, G, K).repeat_interleave(H // G, dim=2)
    dt = torch.nn.functional.softplus(torch.randn(2, T, H, generator=g) - 2.0).double()
    rate = (-torch.arange(1, K + 1).expand(H, K) * torch.rand(H, 1, generator=g)).double()
    m = RecurrentInputs(q=grouped() * 0.5, k=grouped(), v=rnd(2, T, H, V), dt=dt, rate=rate.contiguous())
    return m, rnd(2, H, K, V) * 0.3


def _reference(m, S):
    log_decay, v = selective_to_additive(m.dt, m.rate, m.v)
    return recurrent_ref(m.q, m.k, v, log_decay=log_decay, initial_state=S)


def _rel(x, y) -> float:
    return ((x - y).norm() / y.norm()).item()


@pytest.mark.parametrize("V", [1, 3], ids=["mamba1_channels", "wider_heads"])
def test_scan_arguments_through_the_published_scan_equal_the_reference(V):
    m, _ = _inputs(19, V)
    u, delta, A, B, C = paths.scan_arguments(m, G)
    assert B.shape == (2, G, K, 19) and u.shape == delta.shape == (2, H * V, 19) and A.shape == (H * V, K)
    y, last = selective_scan_loop(*(t.double() for t in (u, delta, A, B, C)))
    want_o, want_S = _reference(m, None)
    assert _rel(y.transpose(1, 2).reshape(want_o.shape), want_o) < 1e-12
    assert _rel(last.reshape(2, H, V, K).transpose(-1, -2), want_S) < 1e-12


def test_the_selective_step_forms_of_the_reference_agree():
    m, S = _inputs(40, 2)
    log_decay, v = selective_to_additive(m.dt, m.rate, m.v)
    o, S1 = _reference(m, S)
    o_c, S_c = chunked_ref(m.q, m.k, v, log_decay=log_decay, initial_state=S, chunk_size=16)
    assert _rel(o_c, o) < 1e-12 and _rel(S_c, S1) < 1e-12




@pytest.mark.parametrize("grad", [True, False], ids=["training", "inference"])
def test_the_path_adds_the_initial_state_and_the_final_state_exactly(grad):
    """With an initial state, on both routes to the final state (recomputed with its gradient
    while training; the scan's own otherwise): outputs, final state and, while training, every
    input gradient equal the reference. Float32 inside, as the path runs the scan."""
    m, S = _inputs(23, 2)
    # q and k as the projections make them, one per group, repeated over the group's heads inside
    # the differentiated computation (MixerModule._heads), so that both sides' gradients compare
    grouped = {"q": m.q[:, :, ::H // G], "k": m.k[:, :, ::H // G]}
    heads = lambda t: t.repeat_interleave(H // G, dim=2)

    def run(fn, S0):
        leaves = {n: t.clone().requires_grad_(grad) for n, t in
                  (grouped | {"v": m.v, "dt": m.dt, "rate": m.rate}).items()}
        S_leaf = S0.clone().requires_grad_(grad)
        o, S_out = fn(RecurrentInputs(**(leaves | {"q": heads(leaves["q"]), "k": heads(leaves["k"])})), S_leaf)
        if grad:
            (o.double().square().sum() + S_out.double().square().sum()).backward()
        return [o.double(), S_out.double()] + ([t.grad for t in leaves.values()] + [S_leaf.grad] if grad else [])

    with torch.set_grad_enabled(grad):
        got = run(lambda mm, S0: paths.scan(mm, S0, G, scan_fn=selective_scan_loop), S)
        want = run(_reference, S)
    names = ["output", "state"] + (["dq", "dk", "dv", "ddt", "drate", "dS0"] if grad else [])
    for name, x, y in zip(names, got, want):
        assert _rel(x.double(), y) < 1e-5, name


def _at(m, t: int):
    return RecurrentInputs(q=m.q[:, t:t + 1], k=m.k[:, t:t + 1], v=m.v[:, t:t + 1], dt=m.dt[:, t:t + 1], rate=m.rate)


@pytest.mark.parametrize("V", [1, 3], ids=["mamba1_channels", "wider_heads"])
def test_step_arguments_through_the_published_update_equal_the_reference_step(V):
    """One decoding step: the state-update kernel's arguments, through the one-step update it
    computes (tests/oracles/ssd_loops.py: state_update), in float64."""
    m, S = _inputs(1, V)
    S = S.float().double()  # the state is float32 by contract
    want_o, want_S = _reference(m, S)
    state, args = paths.step_arguments(m, S, G)
    assert args["A"].stride(-1) == 1  # the kernel's per-entry branch: A = the rate, per state entry
    state = state.double()
    y = state_update(state, *(args[n].double() for n in ("x", "dt", "A", "B", "C")), D=args["D"].double(),
                     dt_bias=args["dt_bias"].double())
    assert _rel(y, want_o[:, 0]) < 1e-12 and _rel(state.transpose(-1, -2), want_S) < 1e-12


def test_decoding_steps_chain_without_touching_the_given_state():
    m, S0 = _inputs(4, 2)
    want_o, want_S = _reference(m, S0)
    S, before = S0, S0.clone()
    for t in range(4):
        o, S = paths.grouped_step(_at(m, t), S, G, kernel=state_update)
        assert o.shape == (2, 1, H, 2) and S.dtype == torch.float32
        assert _rel(o[:, 0], want_o[:, t]) < 1e-6  # the state is float32 between steps
    assert _rel(S.double(), want_S) < 1e-6 and torch.equal(S0, before)
