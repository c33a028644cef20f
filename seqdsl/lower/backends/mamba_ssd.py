"""mamba-ssm's Mamba-2 SSD chunked kernels as the fast path for the scalar-decay recurrence, and its
state-update kernel for decoding steps (CUDA only).

Shape legend
    B batch   T tokens   H heads   G groups (mamba's ngroups)   K key width (mamba's dstate N)
    V value width (mamba's headdim P)   c chunks of l = CHUNK steps
    reference: q, k (B, T, H, K), v (B, T, H, V), log decay (B, T, H), state S (B, H, K, V)
    mamba:     x (B, T, H, V), B and C (B, T, G, K), dA_cumsum and dt (B, H, c, l), state (B, H, V, K)
    one decoding step (selective_state_update): batch 1 with B*H heads and B*G groups, below

The mapping, exact (docs/mamba.md). Rule (1) of seqdsl/reference/recurrent.py with one decay per
head and step is S_t = a_t S_(t-1) + k_t v_t^T, o_t = q_t^T S_t. Mamba-2's SSD is
h_t = exp(dt_t A) h_(t-1) + dt_t x_t B_t^T, y_t = h_t C_t. So h = S^T, x = v, B = k, C = q,
exp(dt_t A) = a_t, and the write must be v_t itself, not dt_t v_t: the lowering does not scale the
write by the step size (docs/lowering.md). The public `mamba_chunk_scan_combined` uses one dt for
both the decay and the write, and undoing the write's scale (x = v / dt) is unsafe: dt -> 0 as the
decay -> 1, and the two halves of dt's gradient then cancel catastrophically. Inside mamba-ssm,
dt and A meet in one place only (`_chunk_cumsum_fwd`: dA_cumsum = the within-chunk cumulative
sum of dt A); every later kernel takes the write scale dt and dA_cumsum as separate tensors. This
module runs those same kernels, in the order `_mamba_chunk_scan_combined_fwd` / `_bwd` run them,
with dA_cumsum = the within-chunk cumulative sum of the log decay and the write scale dt = 1:
the discrete SSD of mamba's `ssd_minimal_discrete` (X = v, A = log decay, B = k, C = q). In the
backward pass mamba's per-step gradient of dA (`ddA`, which mamba's `_chunk_cumsum_bwd` turns into
dt's and A's) is the gradient of the log decay, and the write scale's gradient is dropped (dt = 1
is a constant).

q and k are per-group projections repeated over the H / G heads of each group (MixerModule._heads),
identical within a group, so B and C are taken from one head per group (mamba's ngroups); keys
that are not projections (random or constant keys) are distinct per head: then G = H.

The kernels are mamba-ssm 2.3's private functions (`mamba_ssm.ops.triton.ssd_combined`), so the
path is self-checked against the reference (outputs, final state, every input gradient) once per
machine and versions before it is used, like fla's (fla.py).
"""

from __future__ import annotations

import functools
import math
from collections.abc import Callable

import torch
import torch.nn.functional as F
from torch import Tensor

from seqdsl.custom_ops import custom_op
from seqdsl.ir.key import KernelKey
from seqdsl.lower.backends.base import import_failure
from seqdsl.lower.inputs import RecurrentInputs
from seqdsl.reference import recurrent as rec_ref
from seqdsl.reference import selfcheck

CHUNK = 256  # Mamba-2's chunk size, the path's; `ssd(..., chunk)` takes others (benchmarks: not GPU-tested)
_KERNELS = ("_bmm_chunk_fwd", "_bmm_chunk_bwd", "_chunk_state_fwd", "_chunk_state_bwd_db",
            "_state_passing_fwd", "_state_passing_bwd", "_chunk_scan_fwd", "_chunk_scan_bwd_dstates",
            "_chunk_scan_bwd_dC", "_chunk_scan_bwd_dcb", "_chunk_scan_bwd_ddAcs_stable",
            "_chunk_scan_chunk_state_bwd_dx")


def _ssd():
    from mamba_ssm.ops.triton import ssd_combined

    return ssd_combined


@functools.lru_cache(maxsize=None)
def importable() -> str:
    """"" when mamba-ssm's SSD kernels import here, else why not."""
    failure = import_failure(_ssd, "mamba-ssm")
    if failure:
        return failure
    missing = [name for name in _KERNELS if not hasattr(_ssd(), name)]
    if missing:
        return f"this mamba-ssm lacks the SSD kernels seqdsl calls ({', '.join(missing)}); 2.3.x has them"
    return ""


def groups(key: KernelKey) -> int:
    """mamba's ngroups: the key's query/key groups when keys are projections, else one per head."""
    return key.qk_groups if key.relation == "dot" else key.heads


# --- the mapping -------------------------------------------------------------------------------------


def chunk_decays(log_decay: Tensor | None, B: int, T: int, H: int, device,
                 chunk: int = CHUNK) -> tuple[Tensor, Tensor]:
    """(dA_cumsum, dt), both (B, H, c, l) float32: the within-chunk cumulative log decay (zeros
    for no decay) and the write scale, 1 on real steps and 0 on the padding after T (as mamba's
    `_chunk_cumsum_fwd` leaves the padding: no decay, no write)."""
    c = math.ceil(T / chunk)
    g = torch.zeros(B, T, H, device=device) if log_decay is None else log_decay.float()
    g = F.pad(g, (0, 0, 0, c * chunk - T)).view(B, c, chunk, H).permute(0, 3, 1, 2)
    dt = F.pad(torch.ones(B, T, H, device=device), (0, 0, 0, c * chunk - T)).view(B, c, chunk, H)
    return g.cumsum(-1).contiguous(), dt.permute(0, 3, 1, 2).contiguous()


def unchunk(ddA: Tensor, T: int) -> Tensor:
    """(B, H, c, l) per-step values back to (B, T, H)."""
    B, H, c, l = ddA.shape
    return ddA.permute(0, 2, 3, 1).reshape(B, c * l, H)[:, :T]


# one decoding step of G-grouped inputs on a state: (o, new state)
StepFn = Callable[[RecurrentInputs, "Tensor | None", int], "tuple[Tensor, Tensor]"]

# mamba's (x, log decay, B, C, initial state)
SsdArguments = tuple[Tensor, "Tensor | None", Tensor, Tensor, "Tensor | None"]


def arguments(key: KernelKey, m: RecurrentInputs, S: Tensor | None) -> SsdArguments:
    """mamba's (x, log decay, B, C, initial state) for the reference-style inputs `m`: x = v, B = k and C = q from one head per group, the state
    transposed to (B, H, V, K). One dtype for x, B and C (the values'), the decay and state float32."""
    return _arguments(m, S, groups(key))


def _arguments(m: RecurrentInputs, S: Tensor | None, G: int) -> SsdArguments:
    dtype = m.v.dtype
    step = m.v.shape[2] // G
    pick = lambda t: t[:, :, ::step].to(dtype).contiguous()
    init = None if S is None else S.float().transpose(-1, -2).contiguous()
    decay = None if m.log_decay is None else m.log_decay.float()
    return m.v.contiguous(), decay, pick(m.k), pick(m.q), init


# The forward and the backward are torch.library custom ops, so that `torch.compile` treats each
# as one opaque call (dynamo would otherwise trace into mamba's Python wrappers, and inductor then
# fails to generate code for the within-chunk cumulative sum: "Unexpected tiling", H100,
# torch 2.11). Custom ops return no None: an absent decay or initial state has an empty gradient.
#
# mamba's own backward recomputes the forward's chunk states and the (chunk, chunk) products C B^T
# (`_mamba_chunk_scan_combined_bwd`); here the forward returns them, kept for the backward
# (`kept_shapes`: the states every chunk starts from and CB, float32): three kernels fewer per
# layer and step, about 4% of Mamba-2's step in an H100 profile
# (benchmarks/results/profile_train_mamba2_b16_h100_2026-11-23_round6.log: `_chunk_state_fwd` and
# `_state_passing_fwd` ran twice per layer), for about 130 MB a layer per 16 x 2048 tokens at the
# 110m preset. The forward's states reach `_chunk_scan_fwd` in C's dtype, as mamba's forward
# gives them (its `out_dtype`); the backward gets them in float32, as its recomputation did.


def kept_shapes(x: Tensor, Bm: Tensor, chunk: int) -> tuple[tuple[int, ...], tuple[int, ...]]:
    """The shapes of what the forward keeps for the backward: the chunk states (B, c, H, V * K)
    and CB (B, c, G, chunk, chunk), both float32."""
    batch, T, H, V = x.shape
    G, K = Bm.shape[-2:]
    c = math.ceil(T / chunk)
    return (batch, c, H, V * K), (batch, c, G, chunk, chunk)


def _forward(x: Tensor, log_decay: Tensor | None, Bm: Tensor, Cm: Tensor,
             init: Tensor | None, chunk: int) -> tuple[Tensor, Tensor, Tensor, Tensor]:
    """(o, final state, and for the backward: the chunk states and CB, float32)."""
    ssd = _ssd()
    batch, T, H, V = x.shape
    K = Bm.shape[-1]
    dA_cumsum, dt = chunk_decays(log_decay, batch, T, H, x.device, chunk)
    states = ssd._chunk_state_fwd(Bm, x, dt, dA_cumsum, states_in_fp32=True)
    states, final = ssd._state_passing_fwd(
        states.flatten(-2), dA_cumsum[:, :, :, -1],
        initial_states=None if init is None else init.flatten(-2), chunk_size=chunk)
    CB = ssd._bmm_chunk_fwd(Cm, Bm, chunk, output_dtype=torch.float32)
    out, _ = ssd._chunk_scan_fwd(CB, x, dt, dA_cumsum, Cm, states.to(Cm.dtype).unflatten(-1, (V, K)))
    # contiguous, as the fakes say
    return out.contiguous(), final.unflatten(-1, (V, K)).contiguous(), states.contiguous(), CB.contiguous()


def _backward(x: Tensor, log_decay: Tensor | None, Bm: Tensor, Cm: Tensor, init: Tensor | None,
              states: Tensor, CB: Tensor, dout: Tensor, dfinal: Tensor,
              chunk: int) -> tuple[Tensor, Tensor, Tensor, Tensor, Tensor]:
    """As mamba's _mamba_chunk_scan_combined_bwd, without D, z and seq_idx, and with the
    forward's chunk states and CB (`_forward`) instead of recomputing them."""
    ssd = _ssd()
    batch, T, H, V = x.shape
    G, K = Bm.shape[-2:]
    dout = dout.contiguous()
    dA_cumsum, dt = chunk_decays(log_decay, batch, T, H, x.device, chunk)
    dstates = ssd._chunk_scan_bwd_dstates(Cm, dA_cumsum, dout, dtype=states.dtype)
    dstates, ddA_chunk_cumsum, dinit, states = ssd._state_passing_bwd(
        states, dA_cumsum[:, :, :, -1], dstates.flatten(-2),
        dfinal_states=dfinal.float().flatten(-2).contiguous(),
        has_initial_states=init is not None, dstates_dtype=x.dtype, states_dtype=x.dtype,
        chunk_size=chunk)
    states, dstates = states.unflatten(-1, (V, K)), dstates.unflatten(-1, (V, K))
    dx, _ddt_write, _ = ssd._chunk_scan_chunk_state_bwd_dx(x, dt, dA_cumsum, Bm, CB, dout, dstates)
    dB, ddA_next = ssd._chunk_state_bwd_db(x, dt, dA_cumsum, dstates, B=Bm, ngroups=G)
    dC, ddA_cumsum_prev = ssd._chunk_scan_bwd_dC(states.to(x.dtype), dA_cumsum, dout, C=Cm, ngroups=G)
    dCB = ssd._chunk_scan_bwd_dcb(x, dt, dA_cumsum, dout, ngroups=G).to(CB.dtype)
    dB_all, dC_all = torch.empty_like(Bm), torch.empty_like(Cm)
    ssd._bmm_chunk_bwd(Cm, dCB, residual=dB, out=dB_all)
    ssd._bmm_chunk_bwd(Bm, dCB.transpose(-1, -2), residual=dC, out=dC_all)
    d_log_decay = x.new_empty(0, dtype=torch.float32)
    if log_decay is not None:
        ddA_cumsum_prev[..., -1] += ddA_chunk_cumsum
        ddA = ssd._chunk_scan_bwd_ddAcs_stable(x, dt, dA_cumsum, dout, CB)
        ddA += ddA_next + ddA_cumsum_prev.flip([-1]).cumsum(dim=-1).flip([-1])
        d_log_decay = unchunk(ddA, T).contiguous()  # per-step gradient of dA = of the log decay
    # mamba gives the initial state's gradient in x's dtype; the op's is the state's (float32)
    dinit = x.new_empty(0, dtype=torch.float32) if init is None else dinit.unflatten(-1, (V, K)).to(init.dtype)
    return (dx.contiguous(), d_log_decay.contiguous(), dB_all.contiguous(), dC_all.contiguous(),
            dinit.contiguous())  # as the fakes say


@custom_op("mamba_ssd")
def _ssd_op(x: Tensor, log_decay: Tensor | None, Bm: Tensor, Cm: Tensor,
            init: Tensor | None, chunk: int) -> tuple[Tensor, Tensor, Tensor, Tensor]:
    return _forward(x, log_decay, Bm, Cm, init, chunk)


@_ssd_op.register_fake
def _(x, log_decay, Bm, Cm, init, chunk):
    batch, T, H, V = x.shape
    states, CB = kept_shapes(x, Bm, chunk)
    return (x.new_empty(batch, T, H, V), x.new_empty(batch, H, V, Bm.shape[-1], dtype=torch.float32),
            x.new_empty(states, dtype=torch.float32), x.new_empty(CB, dtype=torch.float32))


@custom_op("mamba_ssd_bwd")
def _ssd_bwd_op(x: Tensor, log_decay: Tensor | None, Bm: Tensor, Cm: Tensor, init: Tensor | None,
                states: Tensor, CB: Tensor, dout: Tensor, dfinal: Tensor,
                chunk: int) -> tuple[Tensor, Tensor, Tensor, Tensor, Tensor]:
    return _backward(x, log_decay, Bm, Cm, init, states, CB, dout, dfinal, chunk)


@_ssd_bwd_op.register_fake
def _(x, log_decay, Bm, Cm, init, states, CB, dout, dfinal, chunk):
    fresh = lambda t: x.new_empty(0, dtype=torch.float32) if t is None else t.new_empty(t.shape)  # contiguous
    return tuple(fresh(t) for t in (x, log_decay, Bm, Cm, init))


def _ssd_setup(ctx, inputs, output):
    kept = output[2:]  # after o and the final state
    ctx.save_for_backward(*inputs[:-1], *kept)
    ctx.chunk = inputs[-1]
    # the kept states and CB are the backward's, not outputs anyone differentiates: no zero
    # gradients materialised for them (130 MB a layer at the 110m preset); o's and the final
    # state's are made here when they got none
    ctx.mark_non_differentiable(*kept)
    ctx.set_materialize_grads(False)


def _ssd_grad(ctx, dout, dfinal, _dstates, _dCB):
    x, log_decay, Bm, Cm, init, states, CB = ctx.saved_tensors
    batch, T, H, V = x.shape
    if dout is None:
        dout = x.new_zeros(batch, T, H, V)
    if dfinal is None:
        dfinal = x.new_zeros(batch, H, V, Bm.shape[-1], dtype=torch.float32)
    dx, d_log_decay, dB, dC, dinit = _ssd_bwd_op(x, log_decay, Bm, Cm, init, states, CB, dout, dfinal, ctx.chunk)
    return dx, None if log_decay is None else d_log_decay, dB, dC, None if init is None else dinit, None


_ssd_op.register_autograd(_ssd_grad, setup_context=_ssd_setup)


def ssd(x: Tensor, log_decay: Tensor | None, Bm: Tensor, Cm: Tensor, init: Tensor | None,
        chunk: int = CHUNK) -> tuple[Tensor, Tensor]:
    """mamba's layout in and out: o (B, T, H, V), final state (B, H, V, K) float32. The discrete
    SSD with write scale 1 (see the module docstring), in chunks of `chunk` steps."""
    o, final, _states, _CB = _ssd_op(x, log_decay, Bm, Cm, init, chunk)
    return o, final


def run(key: KernelKey, m, S: Tensor | None, chunk: int = CHUNK) -> tuple[Tensor, Tensor]:
    """The reference's (o, final state (B, H, K, V)) for RecurrentInputs `m`, through mamba-ssm."""
    o, final = ssd(*arguments(key, m, S), chunk)
    return o, final.transpose(-1, -2)


# --- decoding steps: mamba's selective_state_update ---------------------------------------------------
#
# The state-update kernel computes, per (batch, head) program and in float32:
#     dt' = dt + dt_bias,  state = state * exp(A dt') + (dt' B) x^T,  out = state C + D x
# with A (nheads, dim, dstate) indexed by head only: it has no batch stride, so a decay that
# differs per sequence cannot be given per head. The step therefore runs with batch 1 and the
# B x H (sequence, head) pairs as its heads, B and C with B x G groups (pair b*H + h reads group
# (b*H + h) // (H/G) = b*G + h // (H/G), its own sequence's group); A = the pair's log decay
# broadcast over (dim, dstate) by zero strides, dt = 1 and dt_bias = D = 0, also zero-strided.
# Then exp(A dt') = exp(log decay * 1) is the decay, dt' B = B is the key itself (the write
# scale is exactly 1: x 1.0 and + 0.0 are exact in float32) and D x = 0: the kernel's update is
# rule (1)'s S_t = a_t S_(t-1) + k_t v_t^T, o_t = q_t^T S_t, in mamba's (V, K) layout. With A, dt
# and dt_bias all zero-strided the kernel takes its TIE_HDIM branch (one scalar decay per head).
# D is passed (zero) because mamba 2.3's wrapper cannot take D = None (its stride arguments
# unpack `0`). The kernel updates the state in place: it is given a copy.

MAX_GRID = 65535  # CUDA's bound on a grid's y and z sizes: the kernel's batch and head axes


def state_update_kernel():
    from mamba_ssm.ops.triton.selective_state_update import selective_state_update

    return selective_state_update


def step_arguments(m, S: Tensor | None, G: int) -> tuple[Tensor, dict[str, Tensor]]:
    """For one decoding step (T = 1) of RecurrentInputs `m` with G groups (`groups(key)`) on
    state S (B, H, K, V): the new state
    (B, H, V, K) float32, a fresh copy that the kernel updates in place, and the other arguments
    of `selective_state_update` for it, in the flattened layout above: x (1, B*H, V), dt (1, B*H, V),
    A (B*H, V, K), B and C (1, B*G, K), D and dt_bias (B*H, V)."""
    x, log_decay, Bm, Cm, _ = _arguments(m, None, G)
    batch, _, H, V = x.shape
    G, K = Bm.shape[-2:]
    rows = batch * H
    prior = torch.zeros(batch, H, V, K, device=x.device) if S is None else S.float().transpose(-1, -2)
    state = prior.clone(memory_format=torch.contiguous_format)
    g = torch.zeros(batch, H, device=x.device) if log_decay is None else log_decay[:, 0].float()
    zero = torch.zeros((), device=x.device).expand(rows, V)
    return state, dict(x=x.reshape(1, rows, V), dt=torch.ones((), device=x.device).expand(1, rows, V),
                       A=g.reshape(rows, 1, 1).expand(rows, V, K), B=Bm.reshape(1, batch * G, K),
                       C=Cm.reshape(1, batch * G, K), D=zero, dt_bias=zero)


def step(key: KernelKey, m, S: Tensor | None) -> tuple[Tensor, Tensor]:
    """The reference's (o (B, 1, H, V), new state (B, H, K, V) float32) for one decoding step of
    RecurrentInputs `m` on state S, through mamba-ssm's `selective_state_update`. Inference only:
    the kernel has no backward."""
    return grouped_step(m, S, groups(key))


def grouped_step(m, S: Tensor | None, G: int, kernel=None) -> tuple[Tensor, Tensor]:
    """`step` for G groups; `kernel` replaces mamba's (a test's oracle with its in-place contract)."""
    kernel = kernel or state_update_kernel()
    state, args = step_arguments(m, S, G)
    batch, H, V, K = state.shape
    flat = state.view(1, batch * H, V, K)
    out = torch.empty_like(args["x"])
    per = max(1, MAX_GRID // H)  # whole sequences per launch, so that groups stay aligned
    for b0 in range(0, batch, per):
        heads, groups = slice(b0 * H, (b0 + per) * H), slice(b0 * G, (b0 + per) * G)
        out[:, heads] = kernel(flat[:, heads], args["x"][:, heads], args["dt"][:, heads], args["A"][heads],
                               args["B"][:, groups], args["C"][:, groups], D=args["D"][heads],
                               dt_bias=args["dt_bias"][heads])
    return out.view(batch, 1, H, V), state.transpose(-1, -2)


# --- the self-check ----------------------------------------------------------------------------------


def _inputs(K: int, V: int, G: int, H: int, decay: bool, dtype: torch.dtype, device: torch.device,
            T: int = CHUNK + 16):
    """Random inputs in mamba's layout, shaped like a real call: T over one chunk and not a
    multiple of it, G groups shared by H heads, an initial state. T is a multiple of 16, as the
    usual training lengths are: Triton compiles a kernel once per divisibility of its integer
    arguments by 16, so the kernels the check compiled (272 steps; 300 before) are the ones the
    first training step then runs, not compiled again."""
    draw = selfcheck.Draws(device)
    rnd = draw.normal
    B = 1
    x, Bm, Cm = rnd(B, T, H, V), rnd(B, T, G, K), rnd(B, T, G, K) * K ** -0.5
    log_decay = -draw.uniform(B, T, H) * 0.5 if decay else None
    init = rnd(B, H, V, K) * 0.1
    return [x.to(dtype), log_decay, Bm.to(dtype), Cm.to(dtype), init]


def reference(x, log_decay, Bm, Cm, init) -> tuple[Tensor, Tensor]:
    """The same call on the reference (chunked_ref), in mamba's layout."""
    H, G = x.shape[2], Bm.shape[2]
    heads = lambda t: t.repeat_interleave(H // G, dim=2)
    o, S = rec_ref.chunked_ref(heads(Cm), heads(Bm), x, log_decay=log_decay,
                               initial_state=None if init is None else init.transpose(-1, -2))
    return o, S.transpose(-1, -2)


@functools.lru_cache(maxsize=None)
def self_check(dtype: torch.dtype, device: torch.device, K: int, V: int, G: int, H: int,
               decay: bool) -> tuple[bool, str]:
    """(True, "") when the SSD path matches the reference (output, final state, every input
    gradient) on this machine for calls of these widths and grouping; else (False, what went
    wrong). The first call compiles and autotunes mamba's kernels."""
    names = ("x (v)", "log_decay", "B (k)", "C (q)", "initial_state")
    return selfcheck.self_check(
        ssd, reference, _inputs(K, V, G, min(H, 4 * G), decay, dtype, device), names,
        outputs=("output", "state"), tolerance=selfcheck.TF32_TOLERANCE.get(dtype, 5e-3),
        reference_dtype=torch.float32, device=device)


def _step_inputs(K: int, V: int, G: int, H: int, decay: str, dtype: torch.dtype, device: torch.device,
                 steps: int = 3):
    """Reference-style inputs for `steps` decoding steps of a batch of 2 (the SSD step flattens
    sequences and heads together), q and k shared within each of G groups, and a state. `decay`
    is the key's decay_shape: "none", "scalar" (a log decay) or "selective" (step sizes, rates)."""

    g = torch.Generator(device="cpu").manual_seed(0)
    rnd = lambda *shape: torch.randn(*shape, generator=g).to(device=device, dtype=dtype)
    B = 2
    grouped = lambda: rnd(B, steps, G, K).repeat_interleave(H // G, dim=2)
    m = RecurrentInputs(q=grouped() * K ** -0.5, k=grouped(), v=rnd(B, steps, H, V))
    if decay == "scalar":
        m.log_decay = -torch.rand(B, steps, H, generator=g).to(device) * 0.5
    elif decay == "selective":
        m.dt = torch.nn.functional.softplus(torch.randn(B, steps, H, generator=g) - 3.0).to(device)
        m.rate = -torch.arange(1, K + 1, dtype=torch.float32, device=device).expand(H, K).contiguous()
    return m, torch.randn(B, H, K, V, generator=g).to(device) * 0.1


@functools.lru_cache(maxsize=None)
def step_self_check(dtype: torch.dtype, device: torch.device, K: int, V: int, G: int, H: int,
                    decay: str, take_step: StepFn | None = None) -> tuple[bool, str]:
    """(True, "") when three chained decoding steps through `selective_state_update` match the
    reference recurrent step (each output and the new state) and leave the state they are given
    unchanged, for steps of these widths, grouping and decay (the key's decay_shape) on this
    machine; else (False, why). `take_step` is the G-grouped step checked: this module's
    `grouped_step` by default, mamba_scan's for the selective decay (MambaBackend passes it)."""
    H = min(H, 4 * G)
    m, S0 = _step_inputs(K, V, G, H, decay, dtype, device)
    # the reference in float64 and outside any autocast region: planning can run inside the
    # caller's bf16 autocast, and a float32 reference there (or under TF32) differs from the
    # exact float32 kernel by more than the tolerance (7e-3, H100, bf16 autocast)
    with torch.autocast(device.type, enabled=False):
        return _step_check(m, S0, G, decay, selfcheck.TF32_TOLERANCE.get(dtype, 5e-3), take_step or grouped_step)


def _step_check(m: RecurrentInputs, S0: Tensor, G: int, decay: str, tol: float,
                take_step: StepFn) -> tuple[bool, str]:
    up = lambda t: None if t is None else t.double()
    log_decay, v = up(m.log_decay), m.v.double()
    if decay == "selective":
        assert m.dt is not None and m.rate is not None, "the selective decay comes as a step and a rate"
        log_decay, v = rec_ref.selective_to_additive(m.dt.double(), m.rate.double(), v)
    want_o, want_S = rec_ref.recurrent_ref(m.q.double(), m.k.double(), v, log_decay=log_decay,
                                           initial_state=S0.double())
    rel = lambda x, y: ((x.double() - y).norm() / (y.norm() + 1e-12)).item()
    at = lambda x, t: None if x is None else x[:, t:t + 1]
    S, before = S0, S0.clone()
    try:
        with torch.no_grad():
            for t in range(m.v.shape[1]):
                one = RecurrentInputs(q=m.q[:, t:t + 1], k=m.k[:, t:t + 1], v=m.v[:, t:t + 1],
                                      log_decay=at(m.log_decay, t),
                                      dt=at(m.dt, t), rate=m.rate)
                o, S = take_step(one, S, G)
                error = rel(o[:, 0], want_o[:, t])
                if not error <= tol:
                    return False, f"step {t}'s output differs from the reference by {error:.2e} (relative, tol {tol:.0e})"
    except Exception as err:  # the kernel refused to run here: that is the finding
        return False, f"{type(err).__name__}: {str(err).splitlines()[0][:200] if str(err) else ''}"
    if not torch.equal(S0, before):
        return False, "the kernel changed the state it was given (it must update a copy)"
    error = rel(S, want_S)
    if not error <= tol:
        return False, f"the state after the steps differs from the reference by {error:.2e} (relative, tol {tol:.0e})"
    return True, ""
