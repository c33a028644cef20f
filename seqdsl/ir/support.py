"""What each fast backend accepts, as a function of the kernel key: one table per backend.

The static half of every path decision lives here, torch-free, so that the checker's backend
rules (W002, W003) and the planner (`seqdsl.lower.paths`) read the same facts and cannot drift.
What only the machine can answer (is the package importable, does the kernel pass its
self-check on this GPU and Triton, is this fla version's known refusal in force) is decided at
run time by the planner, after the table has said yes.

Every table returns a `Support`: the op it would run, or the reason it will not. A reason names
the key field that rules the backend out, in words a user can act on.

This module imports neither torch nor triton.
"""

from __future__ import annotations

import dataclasses
import struct
from dataclasses import dataclass

from seqdsl.ir.key import (KernelKey, SelectKey, chunk_size, runs_topk_kernels, selection, selection_group,
                           shared_kv_group)


@dataclass(frozen=True)
class Support:
    backend: str  # "sdpa", "fla", "triton", "mamba"
    op: str | None  # what would run, e.g. "fla.chunk_gla"; None when the backend cannot
    reason: str = ""  # why not (empty when op is set)
    tiling: bool = False  # the refusal is about chunk/tile sizes (checker rule W002), not dims
    # A refusal's spec slot (a source-map path such as ("select", "k")), where the checker's
    # caret goes, and what to write there instead
    slot: tuple[str, ...] = ()
    fix: str = ""

    @property
    def ok(self) -> bool:
        return self.op is not None


def _no(backend: str, reason: str, slot: tuple[str, ...], fix: str, *, tiling: bool = False) -> Support:
    return Support(backend, None, reason, tiling, slot, fix)


def _width_slot(key: KernelKey, which: str) -> tuple[str, ...]:
    """The slot a user edits to change the key (query/key) or value width of a head."""
    return ("key_dim",) if which == "key" and key.key_dim != key.head_dim else ("head_dim",)


def _float32(x: float) -> float:
    """`x` rounded to float32 (what a kernel multiplies by)."""
    return struct.unpack("f", struct.pack("f", x))[0]


def _pow2(n: int) -> bool:
    return n > 0 and not n & (n - 1)


# --- torch.nn.functional.scaled_dot_product_attention ----------------------------------------------


def sdpa(key: KernelKey) -> Support:
    """Softmax attention over every visible key: any head dim (SDPA has a math fallback), any
    mask. `sdpa.causal` is the flash/cuDNN-eligible call with `is_causal` and no mask.

    `is_causal` needs a positive scale: its kernels (CPU flash, CUDA flash and cuDNN) mask the
    future with -inf before multiplying by the scale, so a scale <= 0 turns the masked entries
    into +inf or NaN and the rows into NaN (seen with torch 2.11 on an H100 and 2.13 on CPU);
    with an explicit mask every backend is exact for any scale (docs/lowering.md, Paths). The
    scale is judged as the kernels see it, in float32: 1.5e-109 > 0 rounds to 0 there (a NaN row
    hypothesis found, tests/lower/test_lowering_contract.py)."""
    if key.family == "select":
        return _no("sdpa", "top-k selection keeps a subset of the visible keys; SDPA attends all of them",
                   ("select",), "`select = none`, or a top-k that keeps every key of the context")
    if key.family != "softmax":
        return _no("sdpa", f"`{key.weights}` weights are not a softmax", ("weights",), "`weights = softmax`")
    positive = _float32(key.scale / key.temperature) > 0
    if key.visibility == "full" and key.position != "alibi" and not key.score_bias and positive:
        return Support("sdpa", "sdpa.causal")
    return Support("sdpa", "sdpa.mask")


# --- flash-linear-attention ------------------------------------------------------------------------

FLA_MIN_DIM = 16  # fla's tiles are at least 16 wide (tl.dot): smaller key/value widths cannot run


def fla(key: KernelKey) -> Support:
    """The fla chunked kernel for a recurrent mixer (inputs as the reference takes them)."""
    if key.family != "recurrent":
        return _no("fla", "flash-linear-attention runs the recurrent (linear-weights) family only",
                   ("weights",), "`weights = linear`")
    if min(key.feature_dim, key.value_cols) < FLA_MIN_DIM:
        slot = _width_slot(key, "key" if key.feature_dim < FLA_MIN_DIM else "value")
        return _no("fla", f"key/value widths {key.feature_dim}x{key.value_cols} are below fla's "
                          f"{FLA_MIN_DIM}-wide tiles", slot,
                   f"a width of at least {FLA_MIN_DIM}, e.g. `{slot[0]} = 64`")
    odd = [(which, n) for which, n in (("key", key.feature_dim), ("value", key.value_cols)) if not _pow2(n)]
    if odd:
        # a guard, not an explanation: at such widths (a normalised linear attention's 65 value
        # columns, 66 padded; Based's 273-wide Taylor features) fla's first call did not finish
        # in over 4.5 minutes on an H100 with Triton 3.6, and the cause was not profiled
        # (docs/lowering.md, "fla and widths")
        which, n = odd[0]
        reason = (f"{which} width {n} is not a power of two: fla's kernels at such widths did not finish "
                  f"their first call in minutes on an H100 (Triton 3.6), and are not run until that is understood")
        if which == "value" and key.weights == "normalized_linear" and _pow2(key.head_dim):
            return _no("fla", reason, ("weights",), "`weights = linear` (no normaliser column)")
        if which == "key" and key.feature_dim != key.key_dim:  # the feature map sets the width
            return _no("fla", reason, ("relation", "feature"), "a feature map that keeps the key width, "
                                                                "e.g. `feature = elu1`")
        slot = _width_slot(key, which)
        return _no("fla", reason, slot, f"a {which} width that is a power of two, e.g. `{slot[0]} = 64`")
    shape = key.decay_shape
    if shape == "selective":
        return _no("fla", "Mamba-1's selective step (a step size per head times a rate per key channel, "
                          "the write scaled by the step): fla's chunk_gla could run its expanded "
                          "per-channel form, which is not wired", ("decay",),
                   "nothing for fla: mamba-ssm's selective scan runs it on CUDA")
    if key.update == "rwkv7":
        return Support("fla", "fla.chunk_rwkv7")
    if key.update == "bonus":
        return Support("fla", "fla.chunk_rwkv6")
    if key.update == "additive":
        return Support("fla", "fla.chunk_gla" if shape == "vector" else "fla.chunk_simple_gla")
    if key.update == "delta":
        if shape == "vector":
            return _no("fla", "fla has no delta-rule kernel with a per-channel decay", ("decay",),
                       "`decay = data_dependent(scalar)` (Gated DeltaNet's)")
        return Support("fla", "fla.chunk_delta_rule" if shape == "none" else "fla.chunk_gated_delta_rule")
    raise ValueError(f"unhandled update {key.update!r}")  # exhaustiveness: tests/ir/test_exhaustive.py


# --- the generated Triton kernels (codegen/, kernels/) -----------------------------------------------

TRITON_HEAD_DIMS = (16, 32, 64, 128)  # widths the generated kernels take as whole tiles
TRITON_MIN_CHUNK = 16  # a chunk is loaded as one tile: a power of two >= 16 (tl.arange, tl.dot)
# ... and at most 128 rows: the chunk backward holds a chunk's keys, values and their two
# float32 gradient accumulators in one program (4 x 128 x 128 values fill an H100 SM)
TRITON_MAX_CHUNK = 128
# Longer chunks (MoBA's 512-token blocks) where only the chunks' mean keys are read to choose
# them (score = mean, the own chunk attended, no gradient through the choice): the selection
# ranks whole chunks, and the attention takes each chosen chunk, and the own chunk's earlier
# part, as tiles of TRITON_MAX_CHUNK rows (kernels/topk_chunk.py, `attention_key`).
TRITON_MAX_SPLIT_CHUNK = 1024
TRITON_MAX_TILES = 64  # tiles a query attends besides its own: the pair buffers hold T x this many


def chunk_split(sel: SelectKey) -> int:
    """Tiles of TRITON_MAX_CHUNK rows each chunk of `sel` is attended as (1: the chunk is one tile)."""
    return max(1, chunk_size(sel) // TRITON_MAX_CHUNK)


def attention_key(key: KernelKey) -> KernelKey:
    """The key whose attention kernels attend `key`'s selection: `key` itself, or for chunks
    split in tiles, chunk(TRITON_MAX_CHUNK) with a slot per chosen chunk's tile and per earlier
    tile of the own chunk (k * S + S - 1 for S tiles a chunk), the own tile attended causally."""
    sel = selection(key)
    split = chunk_split(sel)
    if split == 1:
        return key
    return dataclasses.replace(key, select=dataclasses.replace(sel, chunk=TRITON_MAX_CHUNK, k=sel.k * split + split - 1))


def group_attention(key: KernelKey) -> bool:
    """Whether the top-k chunk kernels attend per (query, key/value group): the heads that choose
    their chunks together (`share = group`) also read one key/value head, and there are no sink
    tokens. Each chosen chunk is then loaded once for the whole group, the group's heads the rows
    of one tile (NSA's kernel form), and the output is written directly, with no per-pair
    partials; otherwise (each head alone, keys per head, sinks) the attention runs per key chunk
    over the (query, slot) pairs that chose it, merged by log-sum-exp."""
    share = selection_group(key)
    return share > 1 and shared_kv_group(key) == share and selection(key).sink == 0


def chunk_tiling(sel: SelectKey) -> str:
    """Why the generated kernels cannot tile the chunks of `sel` ("" when they can)."""
    size, split = chunk_size(sel), chunk_split(sel)
    if size < TRITON_MIN_CHUNK or size > TRITON_MAX_SPLIT_CHUNK or not _pow2(size):
        return (f"chunk({size}) is not a power of two in {TRITON_MIN_CHUNK}..{TRITON_MAX_SPLIT_CHUNK}: "
                "the kernels load a chunk in whole tiles")
    if size > TRITON_MAX_CHUNK and not (sel.k > 1 and sel.score == "mean" and sel.local and sel.grad == "none"):
        return (f"chunk({size}) is longer than one tile ({TRITON_MAX_CHUNK}): the generated kernels split "
                f"longer chunks only for top-k (k > 1) with score = mean, the own chunk and grad = none")
    if split > 1 and sel.k * split + split - 1 > TRITON_MAX_TILES:
        return (f"top-{sel.k} of chunk({size}): {sel.k * split} tiles of {TRITON_MAX_CHUNK} per "
                f"query, more than the {TRITON_MAX_TILES} the generated kernels attend")
    return ""


TRITON_TOPK_MAX = 16  # chunks a query may select on the generated top-k kernels (NSA's 16)
TRITON_TOPK_ELEMENT_MAX = 64  # keys a query may select on the generated top-k element kernels
TRITON_MAX_SINK = 128  # sink tokens under chunk selection: one key tile on the top-k chunk kernels


def sink_tile(sel: SelectKey) -> int:
    """Keys of the tile the top-k chunk kernels hold `sel`'s sink tokens in: a power of two >= 16
    (the smallest tl.dot operand), 0 without sinks."""
    return max(16, 1 << (sel.sink - 1).bit_length()) if sel.sink else 0


def triton(key: KernelKey) -> Support:
    """The generated selection kernels: element selection with 1 <= k <= 64 (STE or none), over
    all earlier keys or a window and its sinks; chunk selection with 1 <= k <= 16 by max, mean or
    lse chunk scores (lse on the top-k kernels, also for k = 1), with the STE gate or without,
    up to 128 sink tokens, and chunks chosen per key/value group in NSA's form (own chunk, no
    gradient through the choice); these three on the top-k kernels, also for k = 1.
    (The recurrent family's Triton kernel is not generated: `triton_recurrent`.)"""
    sel = key.select
    if key.family != "select" or sel is None:
        return _no("triton", "the generated kernels cover the Top-1 selection family only", ("select",),
                   "`select = top(1)` or `top(1, over=chunk(128))`")
    if sel.k != 1 and sel.over == "element":
        if sel.k > TRITON_TOPK_ELEMENT_MAX:
            return _no("triton", f"top-{sel.k} element selection: the generated kernels keep at most "
                                 f"{TRITON_TOPK_ELEMENT_MAX} keys per query (a sorted list in registers)",
                       ("select", "k"), f"`k` of at most {TRITON_TOPK_ELEMENT_MAX}")
    elif sel.k > TRITON_TOPK_MAX:
        return _no("triton", f"top-{sel.k}: the generated chunk kernels keep at most {TRITON_TOPK_MAX} chunks "
                             "per query (a running list in registers)", ("select", "k"), f"`k` of at most {TRITON_TOPK_MAX}")
    if key.feature != "identity":
        return _no("triton", f"feature map `{key.feature}` under selection", ("relation", "feature"),
                   "`feature = identity`")
    if key.scale <= 0:
        # the kernels rank the raw q . k and apply scale / temperature after (codegen/templates)
        return _no("triton", f"score scale {key.scale:g}: the generated kernels rank the raw q . k, which "
                             "only a positive scale keeps in order", ("relation", "scale"),
                   "a positive `scale` (or `auto`)")
    for what, dim in (("key", key.feature_dim), ("value", key.head_dim)):
        if dim not in TRITON_HEAD_DIMS:
            widths = ", ".join(map(str, TRITON_HEAD_DIMS))
            return _no("triton", f"{what} width {dim} is not one of {widths}", _width_slot(key, what),
                       f"a {what} width of {widths}, e.g. `{_width_slot(key, what)[0]} = 64`")
    if key.position == "alibi":
        return _no("triton", "ALiBi under selection is not generated (reference only)", ("position",),
                   "`position = rope`")
    if key.score_bias:
        return _no("triton", "an additive score bias (decay or positional relation) under selection is "
                             "not generated (reference only)", ("decay",), "`decay = none`")
    if key.visibility == "chunk_local" or (key.visibility == "window" and sel.over == "chunk"):
        return _no("triton", f"`visibility = {key.visibility}` under {sel.over} selection is not generated "
                             "(reference only; element selection runs a window and its sink tokens)",
                   ("visibility",), "`visibility = full`, or `over = element` with a window")
    if sel.over == "chunk" and sel.sink > TRITON_MAX_SINK:
        return _no("triton", f"{sel.sink} sink tokens under chunk selection: the generated kernels hold the "
                             f"sinks in one tile of at most {TRITON_MAX_SINK} keys", ("select", "sink"),
                   f"`sink` of at most {TRITON_MAX_SINK}")
    if sel.share == "group" and (sel.grad == "ste" or not sel.local):
        why = "the STE gate" if sel.grad == "ste" else "the own chunk as a candidate (`local = false`)"
        return _no("triton", f"chunks chosen per key/value group (`share = group`) with {why} are not generated "
                             "(reference only; the kernels take NSA's form: the own chunk attended, `grad = none`)",
                   ("select", "share"), "`grad = none` and `local = true`, or `share = head`")
    if sel.over == "chunk":
        if chunk_tiling(sel):
            return _no("triton", chunk_tiling(sel), ("select", "over", "size"),
                       "a power of two from 16 to 128, e.g. 128 (to 1024 for top-k by mean keys without "
                       "gradient)", tiling=True)
    # lse chunk scores and sink tokens, k = 1 included, on the top-k kernels (the Top-1 ones score
    # by max and mean and attend the chunks alone)
    return Support("triton", f"triton.top{'k' if runs_topk_kernels(sel) else 1}_{sel.over}")


def triton_recurrent(key: KernelKey) -> Support:
    """The chunked reference (seqdsl/reference/recurrent.py: `chunked_ref`) with the delta rule's
    state passing, one (Dk, Dk) x (Dk, Dv) product per chunk in order, in one Triton kernel per
    direction (kernels/state_pass.py); the rest of the chunk algebra is torch's."""
    if key.update in ("additive", "bonus"):
        return _no("triton", f"update `{key.update}`: additive rules pass their states in closed form "
                             "(batched products), with no walk over the chunks to put in a kernel",
                   ("update",), "nothing: mamba-ssm's or fla's kernels run it on CUDA")
    if key.update == "rwkv7":
        return _no("triton", "RWKV-7's removal walks the chunks as the delta rule does, but the state-passing "
                             "kernel is wired for the delta rule only (fla's chunk_rwkv7 runs RWKV-7)",
                   ("update",), "nothing: fla's chunk_rwkv7 runs it on CUDA")
    for what, dim in (("key", key.feature_dim), ("value", key.value_cols)):
        if dim not in TRITON_HEAD_DIMS:
            widths = ", ".join(map(str, TRITON_HEAD_DIMS))
            return _no("triton", f"state {what} width {dim} is not one of {widths} (the state is one tile)",
                       _width_slot(key, what), f"a {what} width of {widths}, e.g. `{_width_slot(key, what)[0]} = 64`")
    return Support("triton", "triton.delta_chunk")


# --- stage (1): the causal convolution (Triton) --------------------------------------------------------

CONV_MAX_TAPS = 16  # kernels/causal_conv.py unrolls its taps


def causal_conv(size: int) -> Support:
    """The depthwise causal conv with SiLU of stage (1), `conv = causal(size)`, in Triton kernels
    (kernels/causal_conv.py: one forward, two backward) for calls from position 0; a call with a past
    (decoding) runs the reference taps (seqdsl/reference/conv.py), as the plan's reason says."""
    if size > CONV_MAX_TAPS:
        return _no("triton", f"a causal conv of {size} taps: the kernel unrolls its taps, up to {CONV_MAX_TAPS}",
                   ("conv", "size"), f"`conv = causal({CONV_MAX_TAPS})` or shorter")
    return Support("triton", "triton.causal_conv")


# --- mamba-ssm (docs/mamba.md) ------------------------------------------------------------------------


def mamba(key: KernelKey) -> Support:
    """Mamba-2's SSD chunked kernels for rule (1) of seqdsl/reference/recurrent.py with one
    decay per head and step (or none): S_t = a_t S_(t-1) + k_t v_t^T, o_t = q_t^T S_t. The
    mapping (x = v, B = k, C = q, per-step log decay as mamba's dA, write scale 1) is in
    seqdsl/lower/backends/mamba_ssd.py. Mamba-1's selective scan for `data_dependent(selective)`:
    S_t = exp(dt_t A) * S_(t-1) + dt_t k_t v_t^T (seqdsl/lower/backends/mamba_scan.py)."""
    if key.family != "recurrent":
        return _no("mamba", "mamba-ssm runs the recurrent (linear-weights) family only", ("weights",),
                   "`weights = linear`")
    if key.update != "additive":
        return _no("mamba", f"update `{key.update}`: mamba-ssm's scans are additive (no delta rule, "
                            "RWKV bonus or RWKV-7 removal)", ("update",), "nothing for mamba-ssm: fla's kernels run it")
    if key.weights != "linear":
        return _no("mamba", f"`{key.weights}` weights: the mamba-ssm path is wired for plain `linear` "
                            "weights only", ("weights",), "`weights = linear`")
    if key.feature != "identity":
        return _no("mamba", f"feature map `{key.feature}`: the mamba-ssm path takes identity features "
                            "(Mamba-2's B and C) only", ("relation", "feature"), "`feature = identity`")
    if key.decay_shape == "selective":
        if key.position == "alibi":
            return _no("mamba", "ALiBi adds a per-head decay e^-m to the selective step's exp(dt A); the "
                                "selective scan's decay is exp(dt A) alone", ("position",), "`position = none`")
        return Support("mamba", "mamba.selective_scan")
    if key.decay_shape == "vector":
        if key.head_dim == 1:
            return _no("mamba", "a free per-state-entry decay (`data_dependent(vector)`): Mamba-1's selective "
                                "scan decays by exp(delta_t A), one step size per channel and step times a "
                                "constant per state entry; `decay = data_dependent(selective)` says that",
                       ("decay",), "`decay = data_dependent(selective)`")
        return _no("mamba", "a per-channel (vector) decay: the SSD kernel takes one decay per head and step",
                   ("decay",), "`decay = data_dependent(scalar)`, or leave it to fla's chunk_gla")
    return Support("mamba", "mamba.ssd")


# --- all backends, per family, in the planner's order of preference --------------------------------

TABLES = (sdpa, fla, triton, triton_recurrent, mamba)  # every table (tests/ir/test_exhaustive.py)
# Each family's tables, in the planner's order of preference. Where several accept a key, the
# planner runs each one's self-check and, when more than one passes, measures them once and
# takes the faster (seqdsl/lower/paths.py).
_FAST_FOR_FAMILY = {"softmax": (sdpa,), "select": (triton,), "recurrent": (mamba, fla, triton_recurrent)}


def fast_paths(key: KernelKey) -> list[Support]:
    """What each fast backend that could serve this key's family says about it, best first."""
    return [table(key) for table in _FAST_FOR_FAMILY[key.family]]
