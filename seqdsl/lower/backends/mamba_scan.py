"""mamba-ssm's Mamba-1 selective scan (`selective_scan_fn`) as the fast path for
`decay = data_dependent(selective)` (CUDA only).

Shape legend
    B batch   T tokens   H heads   G groups   K key width (mamba's dstate N)   V value width
    D = H * V mamba's channels (dim)
    reference: q, k (B, T, H, K), v (B, T, H, V), dt (B, T, H), rate (H, K), state S (B, H, K, V)
    mamba:     u and delta (B, D, T), A (D, K), B and C (B, G, K, T), last state (B, D, K)

The mapping, exact (docs/mamba.md). The selective step is rule (1) of
seqdsl/reference/recurrent.py with log decay dt_t x rate and a step-scaled write:
S_t = exp(dt_t rate) * S_(t-1) + dt_t k_t v_t^T, o_t = q_t^T S_t. Mamba-1's scan is, per channel d,
x_t = exp(delta_t A_d) * x_(t-1) + delta_t B_t u_t, y_t = C_t . x_t (x of K entries). Column j of
head h's state, S[h][:, j], is one such channel, d = h V + j: x = S[h][:, j], u = v[h, j],
delta = dt[h] and A_d = rate[h] for every j of the head, B = k, C = q; channel d's group,
d // (D / G) = h // (H / G), is its head's. The write dt k v^T is the scan's delta B u: nothing is
divided by the step, so the mapping holds for any step size.

Two things the scan does not do are done here, in PyTorch, exactly:
- An initial state S0 (a prefill continuing one before it): selective_scan_fn starts from zero.
  The recurrence is linear in the state, so S0 adds q_t^T (exp(L_t) * S0) to o_t and exp(L_T) * S0
  to the final state, L_t the cumulative log decay up to t (<= 0: nothing overflows).
- The final state's gradient: selective_scan_fn returns its last state without one (its docstring
  says so). The custom op around the scan (`selective_scan`) returns the kernel's last state with
  a gradient: its backward recomputes sum_t exp(L_T - L_t) * dt_t k_t v_t^T from the scan's own
  inputs and differentiates it, only when the final state is used (a training step drops it, and
  pays nothing).

The scan runs in float32 (u, delta, B, C): the step sizes are small (1e-3 at initialisation) and
delta multiplies every write. Its D skip and z gate are not used (the spec's gate runs outside).
The path is self-checked against the reference (outputs, final state, every input gradient) once
per machine and versions before it is used, like the SSD path (mamba_ssd.py).
Decoding steps (one token, no gradient) run mamba-ssm's `selective_state_update` in its untied
form, which is the selective step as it stands: per (sequence, head) program, with state
(B, H, V, K), x = v (B, H, V), dt broadcast over V, A = rate broadcast over V (H, V, K), B and C
per group, it computes state = exp(A dt) * state + (dt B) x^T, out = state C: exactly
S_t = exp(dt_t rate) * S_(t-1) + dt_t k_t v_t^T, o_t = q_t^T S_t (transposed). D and dt_bias are
passed as zeros (mamba 2.3's wrapper cannot take None for them) and A's last stride is 1, so the
kernel takes its per-entry branch. The kernel updates the state in place: it is given a copy.
"""

from __future__ import annotations

import functools

import torch
from torch import Tensor

from seqdsl.custom_ops import custom_op
from seqdsl.ir.key import KernelKey
from seqdsl.lower.backends.base import import_failure
from seqdsl.lower.inputs import RecurrentInputs
from seqdsl.lower.backends import mamba_ssd
from seqdsl.lower.backends.mamba_ssd import groups
from seqdsl.reference import recurrent as rec_ref
from seqdsl.reference import selfcheck


def _scan_fn():
    from mamba_ssm.ops.selective_scan_interface import selective_scan_fn

    return selective_scan_fn


@functools.lru_cache(maxsize=None)
def importable() -> str:
    """"" when mamba-ssm's selective scan imports here, else why not."""
    return import_failure(_scan_fn, "mamba-ssm's selective scan")


def _cuda():
    """mamba-ssm's CUDA extension, which `selective_scan_fn` wraps (importable() checks both)."""
    import selective_scan_cuda

    return selective_scan_cuda


# The scan and its backward are torch.library custom ops around the extension's fwd and bwd (as
# mamba's SelectiveScanFn calls them, without D, z and delta_bias), so that `torch.compile` sees
# one opaque call: dynamo cannot trace a C++ extension and would break the graph there, at every
# block (docs/mamba.md, Measured, has what that cost).
SCAN_CHUNK = 2048  # the extension keeps one state per 2048 steps: x (B, D, ceil(T / 2048), 2K)


@custom_op("mamba_selective_scan")
def _scan_op(u: Tensor, delta: Tensor, A: Tensor, Bm: Tensor, Cm: Tensor) -> tuple[Tensor, Tensor, Tensor]:
    """(y (B, D, T), last state (B, D, K), x: the states the extension's backward reads)."""
    out, x, *_ = _cuda().fwd(u, delta, A, Bm, Cm, None, None, None, False)
    return out, x[:, :, -1, 1::2].contiguous(), x


@_scan_op.register_fake
def _(u, delta, A, Bm, Cm):
    batch, D, T = u.shape
    K = A.shape[-1]
    return (torch.empty_like(delta), u.new_empty(batch, D, K, dtype=A.dtype),
            u.new_empty(batch, D, -(-T // SCAN_CHUNK), 2 * K, dtype=A.dtype))


@custom_op("mamba_selective_scan_bwd")
def _scan_bwd_op(u: Tensor, delta: Tensor, A: Tensor, Bm: Tensor, Cm: Tensor, x: Tensor, dout: Tensor | None,
                 dlast: Tensor | None) -> tuple[Tensor, Tensor, Tensor, Tensor, Tensor]:
    """The gradients of (u, delta, A, B, C): the extension's backward for y's, plus, when the last
    state has a gradient, the last state's, which the extension does not give (see
    `final_state`; torch.func, since a custom op runs below autograd)."""
    dout = torch.zeros_like(delta) if dout is None else dout.contiguous()
    grads = list(_cuda().bwd(u, delta, A, Bm, Cm, None, None, None, dout, x, None, None, False, False)[:5])
    if dlast is not None:
        vjp = torch.func.vjp(final_state, u, delta, A, Bm)[1]
        for i, extra in enumerate(vjp(dlast.float())):
            grads[i] = grads[i] + extra
    return tuple(grads)


@_scan_bwd_op.register_fake
def _(u, delta, A, Bm, Cm, x, dout, dlast):
    f32 = lambda t: torch.empty_like(t, dtype=torch.float32)  # the extension's dB, dC for per-step B, C
    return torch.empty_like(u), torch.empty_like(delta), torch.empty_like(A), f32(Bm), f32(Cm)


def _scan_setup(ctx, inputs, output):
    ctx.save_for_backward(*inputs, output[2])
    ctx.mark_non_differentiable(output[2])
    ctx.set_materialize_grads(False)  # a training step drops the last state: no gradient to compute for it


def _scan_grad(ctx, dout, dlast, _dx):
    return _scan_bwd_op(*ctx.saved_tensors, dout, dlast)


_scan_op.register_autograd(_scan_grad, setup_context=_scan_setup)


def scan_arguments(m, G: int) -> tuple[Tensor, Tensor, Tensor, Tensor, Tensor]:
    """mamba's (u, delta, A, B, C), float32, for RecurrentInputs `m` of the selective step with G
    groups (q and k identical within a group: one head per group is read)."""
    batch, T, H, V = m.v.shape
    every = H // G
    channels = lambda t: t.float().reshape(batch, T, H * V).transpose(1, 2).contiguous()  # (B, D, T)
    u = channels(m.v)
    delta = channels(m.dt[..., None].expand(batch, T, H, V))
    A = m.rate.float().repeat_interleave(V, dim=0).contiguous()  # (D, K)
    per_group = lambda t: t[:, :, ::every].float().permute(0, 2, 3, 1).contiguous()  # (B, G, K, T)
    return u, delta, A, per_group(m.k), per_group(m.q)


def selective_scan(u: Tensor, delta: Tensor, A: Tensor, Bm: Tensor, Cm: Tensor) -> tuple[Tensor, Tensor]:
    """`selective_scan_fn(u, delta, A, B, C, return_last_state=True)` as custom ops: (y (B, D, T),
    last state (B, D, K)), both differentiable (mamba's last state has no gradient)."""
    out, last, _ = _scan_op(u, delta, A, Bm, Cm)
    return out, last


def scan(m, S: Tensor | None, G: int, scan_fn=None) -> tuple[Tensor, Tensor]:
    """The reference's (o (B, T, H, V), final state (B, H, K, V) float32) for RecurrentInputs `m`
    of the selective step on state S; `scan_fn` replaces `selective_scan` (a test's oracle)."""
    if m.log_decay is not None:
        raise ValueError("the selective scan takes no extra per-head decay (support.mamba refuses ALiBi)")
    scan_fn = scan_fn or selective_scan
    batch, T, H, V = m.v.shape
    K = m.q.shape[-1]
    u, delta, A, Bm, Cm = scan_arguments(m, G)
    y, last = scan_fn(u, delta, A, Bm, Cm)
    o = y.transpose(1, 2).reshape(batch, T, H, V)
    final = last.reshape(batch, H, V, K).transpose(-1, -2)
    if S is not None:  # the scan starts from zero; the recurrence is linear in the state
        cumulative = (m.dt.float()[..., None] * m.rate.float()).cumsum(1)  # L_t (B, T, H, K), <= 0
        o = o + torch.einsum("bthk,bhkv->bthv", m.q.float() * cumulative.exp(), S.float())
        final = final + cumulative[:, -1, :, :, None].exp() * S.float()
    return o.to(m.v.dtype), final


def final_state(u: Tensor, delta: Tensor, A: Tensor, Bm: Tensor) -> Tensor:
    """(B, D, K) the scan's state after its last step from zero, sum_t exp(L_T - L_t) delta_t B_t
    u_t with L_t = sum_(s <= t) delta_s A (differentiable; exponents <= 0)."""
    Bd = Bm.repeat_interleave(u.shape[1] // Bm.shape[1], dim=1)  # (B, D, K, T)
    L = (delta[:, :, None, :] * A[None, :, :, None]).cumsum(-1)
    return ((L[..., -1:] - L).exp() * Bd * (delta * u)[:, :, None, :]).sum(-1)


def run(key: KernelKey, m, S: Tensor | None) -> tuple[Tensor, Tensor]:
    """The reference's (o, final state (B, H, K, V)) for RecurrentInputs `m`, through mamba-ssm."""
    return scan(m, S, groups(key))


# --- decoding steps ------------------------------------------------------------------------------------


def step_arguments(m, S: Tensor | None, G: int) -> tuple[Tensor, dict[str, Tensor]]:
    """For one decoding step (T = 1) of the selective step: the new state (B, H, V, K) float32, a
    fresh copy the kernel updates in place, and the other arguments of `selective_state_update`:
    x (B, H, V), dt (B, H, V), A (H, V, K), B and C (B, G, K), D and dt_bias (H, V)."""
    batch, _, H, V = m.v.shape
    K = m.q.shape[-1]
    every = H // G
    prior = torch.zeros(batch, H, V, K, device=m.v.device) if S is None else S.float().transpose(-1, -2)
    zero = torch.zeros((), device=m.v.device).expand(H, V)
    per_group = lambda t: t[:, 0, ::every].to(m.v.dtype).contiguous()  # (B, G, K)
    return prior.clone(memory_format=torch.contiguous_format), dict(
        x=m.v[:, 0], dt=m.dt[:, 0].float()[..., None].expand(batch, H, V),
        A=m.rate.float()[:, None, :].expand(H, V, K), B=per_group(m.k), C=per_group(m.q), D=zero, dt_bias=zero)


def grouped_step(m, S: Tensor | None, G: int, kernel=None) -> tuple[Tensor, Tensor]:
    """The reference's (o (B, 1, H, V), new state (B, H, K, V) float32) for one decoding step of
    the selective step with G groups, through `selective_state_update` (`kernel` replaces it: a
    test's oracle with its in-place contract). Inference only: the kernel has no backward."""

    kernel = kernel or mamba_ssd.state_update_kernel()
    state, args = step_arguments(m, S, G)
    out = kernel(state, args.pop("x"), args.pop("dt"), args.pop("A"), args.pop("B"), args.pop("C"), **args)
    return out[:, None], state.transpose(-1, -2)


def step(key: KernelKey, m, S: Tensor | None) -> tuple[Tensor, Tensor]:
    """One decoding step of RecurrentInputs `m` on state S, through `selective_state_update`."""
    return grouped_step(m, S, groups(key))


# --- the self-check ----------------------------------------------------------------------------------


def _inputs(K: int, V: int, G: int, H: int, dtype: torch.dtype, device: torch.device, T: int = 300):
    """Random inputs shaped like a real call: q and k per group (B, T, G, K), v, step sizes
    around Mamba-1's initial ones, S4D-real rates, an initial state."""
    g = torch.Generator(device="cpu").manual_seed(0)
    rnd = lambda *shape: torch.randn(*shape, generator=g).to(device=device, dtype=torch.float32)
    B = 2
    q, k, v = rnd(B, T, G, K) * K ** -0.5, rnd(B, T, G, K), rnd(B, T, H, V)
    dt = torch.nn.functional.softplus(rnd(B, T, H) - 3.0)
    rate = -torch.arange(1, K + 1, dtype=torch.float32, device=device).expand(H, K).contiguous()
    return [q.to(dtype), k.to(dtype), v.to(dtype), dt, rate, rnd(B, H, K, V) * 0.1]


def _as_inputs(q, k, v, dt, rate):
    heads = lambda t: t.repeat_interleave(v.shape[2] // t.shape[2], dim=2)
    return RecurrentInputs(q=heads(q), k=heads(k), v=v, dt=dt, rate=rate)


def _fast(q, k, v, dt, rate, S):
    return scan(_as_inputs(q, k, v, dt, rate), S, q.shape[2])


def reference(q, k, v, dt, rate, S) -> tuple[Tensor, Tensor]:
    """The same call on the reference (the selective step as rule (1), chunked_ref)."""
    m = _as_inputs(q, k, v, dt, rate)
    log_decay, v_written = rec_ref.selective_to_additive(m.dt, m.rate, m.v)
    return rec_ref.chunked_ref(m.q, m.k, v_written, log_decay=log_decay, initial_state=S, chunk_size=16)


@functools.lru_cache(maxsize=None)
def self_check(dtype: torch.dtype, device: torch.device, K: int, V: int, G: int, H: int) -> tuple[bool, str]:
    """(True, "") when the selective scan path matches the reference (output, final state, every
    input gradient: q, k, v, dt, rate, initial state) on this machine for calls of these widths
    and grouping; else (False, what went wrong)."""
    names = ("q (C)", "k (B)", "v (u)", "dt (delta)", "rate (A)", "initial_state")
    return selfcheck.self_check(
        _fast, reference, _inputs(K, V, G, min(H, 8 * G), dtype, device), names,
        outputs=("output", "state"), tolerance=selfcheck.TF32_TOLERANCE.get(dtype, 5e-3),
        reference_dtype=torch.float32, device=device)
