"""Pillar W, well-formedness: is the spec consistent, and will it run on a fast path?

Unknown primitives, wrong arity and out-of-range values never get this far: the typing pass
rejects them with a located error. These rules catch what is well-typed but contradictory
(W001, an error), what silently does nothing (W005), and what runs but falls back from the
generated Triton kernels / flash backends to the PyTorch reference path (W002, W003, W004).
"""

from __future__ import annotations

from seqdsl.check.registry import Finding, MixerContext, rule
from seqdsl.ir import nodes, support
from seqdsl.ir.conflicts import conflicts
from seqdsl.ir.key import Dense, dense_at, kernel_key, selection
from seqdsl.ir.layout import LayoutError


@rule("W001", "conflicting-choices", "W", "error")
def conflicting_choices(ctx: MixerContext):
    """Choices that contradict each other: the spec describes no single mixer.

    Why: some slots only mean something together. Top-k selection mixes the selected keys with
    a softmax (the straight-through estimator needs its surrogate), so it conflicts with linear
    weights. State update rules (delta, RWKV-7, RWKV-6's bonus) and feature maps (elu1, relu,
    taylor) belong to the recurrent family and have no meaning under softmax weights.
    Sum-normalised linear weights divide by the sum of the scores, which needs non-negative
    scores (a positive feature map). Chunk selection defines its own visibility, so it takes
    no window, chunk-local visibility or ALiBi; top-k selection takes no decay. A scalar decay
    with softmax weights is allowed (a recency bias on the scores, as in Forgetting-Transformer-
    style attention) and is judged by V003 alone. The list lives in seqdsl/ir/conflicts.py and
    is the same one the lowering refuses to build.

    Paper: not a finding of the paper; the backends need one meaning per spec.

    Fix: the message names the two slots in conflict; change one of them."""
    for c in conflicts(ctx.mixer):
        yield Finding(c.message, ctx.span(*c.where), "the spec must describe one buildable mixer", c.fix)


def _chunk_sizes(m: nodes.Mixer) -> list[tuple[int, tuple[str, ...], str]]:
    """(size, span path, what) for every chunk size in the spec."""
    out: list[tuple[int, tuple[str, ...], str]] = []
    if isinstance(m.select, nodes.Top) and isinstance(m.select.over, nodes.Chunk):
        out.append((m.select.over.size, ("select", "over", "size"), "chunk"))
    if isinstance(m.visibility, nodes.ChunkLocal):
        out.append((m.visibility.size, ("visibility", "size"), "chunk_local"))
    return out


def _dense(ctx: MixerContext) -> Dense | None:
    """The planner's fact (seqdsl/ir/key.py: dense_at): is this mixer plain causal attention
    within the context, its window, chunk or top-k covering it? Then SDPA runs it."""
    key = _key(ctx)
    return dense_at(key, ctx.context) if key is not None else None


def _key(ctx: MixerContext):
    """The kernel key as for the first model using the mixer (the width only matters for
    `heads = auto`, which no backend constrains); None when the heads do not fit (M003)."""
    m = ctx.mixer
    d_model = ctx.models[0].d_model if ctx.models else m.head_dim
    try:
        return kernel_key(m, d_model)
    except (LayoutError, ValueError):
        return None


def _fast_path_refusals(ctx: MixerContext) -> list[support.Support]:
    """What the fast backends for this mixer's family say, when none of them can run it (an
    empty list when one can, or when the mixer is dense attention within the context, which
    the planner runs on SDPA). The facts are the support tables of seqdsl/ir/support.py, the
    same ones the planner reads."""
    key = _key(ctx)
    if key is None or dense_at(key, ctx.context) is not None:
        return []
    verdicts = support.fast_paths(key)
    return [] if any(v.ok for v in verdicts) else verdicts


@rule("W002", "chunk-tiling", "W", "warning")
def chunk_tiling(ctx: MixerContext):
    """Chunk sizes the Triton kernels cannot tile run on the reference path.

    Why: the generated Triton kernels for chunk selection process a chunk as one tile whose
    size is a power of two from 16 to 128 (tl.arange needs a power of two; tensor-core tiles
    are multiples of 16; the backward holds a whole chunk's keys and gradients in one program).
    Top-k selection (k > 1) by mean keys without gradient through the choice (MoBA) splits
    longer chunks, powers of two up to 1024, into such tiles. Any other size is still correct,
    but runs on the PyTorch reference path, which materialises T x T scores: slow and
    memory-hungry at long context. The rule reads the generated kernels' support table
    (seqdsl/ir/support.py), as the planner does.

    Paper: the Top-1 chunk mixers use chunks of 128.

    Fix: a power of two from 16 to 128, e.g. `chunk(128)`."""
    sel = ctx.mixer.select
    key = _key(ctx)
    if not (isinstance(sel, nodes.Top) and isinstance(sel.over, nodes.Chunk) and key is not None):
        return
    why = support.chunk_tiling(selection(key))
    if why and _dense(ctx) is None:  # a chunk covering the context is planned as dense attention
        yield Finding(
            f"{why}; the reference (PyTorch) path is used",
            ctx.span("select", "over", "size"), "speed: the reference path materialises T x T scores",
            "a power of two from 16 to 128, e.g. 128 (to 1024 for top-k by mean keys, `grad = none`)")


@rule("W003", "no-fast-path", "W", "warning")
def no_fast_path(ctx: MixerContext):
    """No fast backend takes this mixer: it runs on the PyTorch reference path.

    Why: each family has fast backends (SDPA for softmax attention, the generated Triton
    kernels for Top-1 selection, flash-linear-attention for the recurrent family), each with
    limits: tile widths (fla's kernels are at least 16 wide; the generated kernels take key and
    value widths of 16 to 128), top-k with k > 1, feature maps or visibility under selection.
    Outside them the spec is still correct but runs on the reference, which is slow at long
    context. The limits are the backends' support tables (seqdsl/ir/support.py), which the
    planner reads too, so this warning and `seqdsl lower`'s path table always agree. A chunk
    size the kernels cannot tile is W002's finding, reported here only when nothing else is.

    The caret points at the slot that rules the backend out (`k` of `top(k)`, `head_dim`,
    `decay`...), and the fix says what that backend would take there.

    Paper: the paper's models use head dims of 64 and 128.

    Fix: the message names what rules each backend out and the caret where it is written;
    e.g. `top(1, ...)` for top-k with k > 1, `head_dim = 64` for a width the kernels do not take."""
    for refusal in _fast_path_refusals(ctx):
        if not refusal.tiling:
            yield Finding(
                f"no fast path: {refusal.backend} cannot run it ({refusal.reason}); the reference "
                "(PyTorch) path is used", ctx.span(*refusal.slot),
                "speed: the reference path is slow at long context", refusal.fix)


@rule("W004", "context-not-multiple-of-chunk", "W", "info")
def context_not_multiple_of_chunk(ctx: MixerContext):
    """The context is not a whole number of chunks: the last chunk is partial.

    Why: chunk selection and chunk-local attention split the sequence into chunks; when the
    context is not a multiple of the chunk size the last chunk is shorter. This is handled
    (kernels mask the tail), but it means the last tokens have a smaller local chunk than the
    others, which is worth knowing when comparing runs. A chunk at least as long as the context
    is one chunk: W006 says what that means (dense attention).

    Paper: 2K and 100K contexts with chunks of 128 (2048 = 16 x 128).

    Fix: a chunk size that divides the context."""
    for size, path, what in _chunk_sizes(ctx.mixer):
        if ctx.context % size and size < ctx.context:  # one chunk covering the context: W006's
            yield Finding(
                f"{ctx.ctx} is not a multiple of {what}({size}): the last chunk holds "
                f"{ctx.context % size} tokens",
                ctx.span(*path), "the last chunk is partial",
                "a chunk size that divides the context")


@rule("W005", "inert-parameter", "W", "warning")
def inert_parameter(ctx: MixerContext):
    """A parameter that has no effect with the other choices made.

    Why: a spec is read by people; a parameter that silently does nothing suggests an
    experiment that is not happening. `score`, `local`, `sink` and `share` apply to chunk
    selection only; `share = group` needs heads that share key/value heads (`kv_groups` below
    the heads); `value_grad` applies to element selection trained with `grad = ste`.

    Paper: not a finding of the paper.

    Fix: remove the parameter, or change the choice that makes it inert."""
    sel = ctx.mixer.select
    if not isinstance(sel, nodes.Top):
        return
    element = isinstance(sel.over, nodes.Element)
    if element and sel.score != "max":
        yield Finding(f"`score = {sel.score}` has no effect on element selection (chunks only)",
                      ctx.span("select", "score"), "the spec says more than the mixer does",
                      "remove `score`, or select over chunks")
    if element and not sel.local:
        yield Finding("`local = false` has no effect on element selection (chunks only)",
                      ctx.span("select", "local"), "the spec says more than the mixer does",
                      "remove `local`")
    if element and sel.sink:
        yield Finding(f"`sink = {sel.sink}` has no effect on element selection (chunks only)",
                      ctx.span("select", "sink"), "the spec says more than the mixer does",
                      "write the sinks in the window, `visibility = window(w, sink=n)`, or select over chunks")
    if element and sel.share == "group":
        yield Finding("`share = group` has no effect on element selection (chunks only)",
                      ctx.span("select", "share"), "the spec says more than the mixer does",
                      "remove `share`, or select over chunks")
    kv_groups = ctx.mixer.kv_groups
    if not element and sel.share == "group" and (kv_groups == "auto" or kv_groups == ctx.heads):
        yield Finding("`share = group` has no effect: every head has its own key/value head, so each "
                      "group is one head", ctx.span("select", "share"), "the spec says more than the mixer does",
                      "set `kv_groups` below the heads (NSA: one key/value head per 16 query heads), or "
                      "remove `share`")
    if sel.value_grad == "soft" and (not element or sel.grad == "none"):
        why = "chunk selection" if not element else "`grad = none`"
        yield Finding(f"`value_grad = soft` has no effect with {why}",
                      ctx.span("select", "value_grad"), "the spec says more than the mixer does",
                      "remove `value_grad`")


@rule("W006", "dense-at-context", "W", "info")
def dense_at_context(ctx: MixerContext):
    """A window, chunk or top-k that covers the whole context: the mixer is dense attention.

    Why: `window(4096)` or `chunk_local(4096)` at a 2048-token context lets every token see its
    whole prefix; `top(k)` with k at least the context keeps every key; chunk selection whose k
    chunks (plus the local one) span the context attends every chunk. Within the context each is
    exactly causal softmax attention, gradients included, and the planner runs it as such (SDPA,
    `sdpa.causal` where nothing else masks the scores), whatever the support tables say of the
    restriction; past the restriction's reach (a longer evaluation) the restriction applies again.
    An ablation meant to restrict or select is not doing so at this context.

    Paper: a window at least as long as the context is full attention (the window ablation's
    limit); selection that keeps everything is not selection.

    Fix: nothing to fix if dense attention is the intent (then say `visibility = full`, `select =
    none`); otherwise a window, chunk or k below the context."""
    dense = _dense(ctx)
    if dense is None:
        return
    vis, sel = ctx.mixer.visibility, ctx.mixer.select
    if isinstance(vis, (nodes.Window, nodes.ChunkLocal)):
        where: tuple[str, ...]
        where, fix = ("visibility", "size"), f"`visibility = full` if dense attention is meant; else a {vis.kind} " \
                                             f"below {ctx.context} tokens"
    else:
        chunk = isinstance(sel, nodes.Top) and isinstance(sel.over, nodes.Chunk) and sel.over.size >= ctx.context
        where = ("select", "over", "size") if chunk else ("select", "k")
        fix = f"`select = none` if dense attention is meant; else a {'chunk' if chunk else 'k'} that selects " \
              "among the keys of the context"
    yield Finding(
        f"dense: {dense.reason} ({ctx.context_from}): this is causal softmax attention, planned as "
        f"such on SDPA (past {dense.upto} tokens the restriction applies again)",
        ctx.span(*where), "the restriction does not restrict at this context", fix)


@rule("W007", "conv-reference", "W", "warning")
def conv_on_reference(ctx: MixerContext):
    """A causal conv longer than the Triton kernel takes runs on its reference taps.

    Why: stage (1)'s short depthwise causal conv with SiLU (`conv = causal(n)`: Mamba, Mamba-2,
    DeltaNet, Based) runs as a Triton kernel on CUDA (kernels/causal_conv.py), which unrolls its
    taps, up to 16 of them. A longer filter is still correct, but runs as PyTorch ops, one
    shifted product per tap, forward and backward: slower in training, more so the longer the
    filter. The limit is the conv's support table (seqdsl/ir/support.py: causal_conv), which the
    planner (seqdsl/lower/conv_path.py) reads too.

    Paper: the short convolutions of Mamba and its relatives have 4 taps.

    Fix: `conv = causal(16)` or shorter; a filter as long as the sequence is a long convolution,
    not in the language yet."""
    conv = ctx.mixer.conv
    if not isinstance(conv, nodes.CausalConv):
        return
    offer = support.causal_conv(conv.size)
    if not offer.ok:
        yield Finding(f"{offer.reason}; the reference taps (PyTorch) are used", ctx.span(*offer.slot),
                      "speed: one shifted product per tap, forward and backward", offer.fix)
