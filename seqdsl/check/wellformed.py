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
from seqdsl.ir.key import kernel_key
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
    out = []
    if isinstance(m.select, nodes.Top) and isinstance(m.select.over, nodes.Chunk):
        out.append((m.select.over.size, ("select", "over", "size"), "chunk"))
    if isinstance(m.visibility, nodes.ChunkLocal):
        out.append((m.visibility.size, ("visibility", "size"), "chunk_local"))
    return out


def _fast_path_refusals(ctx: MixerContext) -> list[support.Support]:
    """What the fast backends for this mixer's family say, when none of them can run it (an
    empty list when one can). The facts are the support tables of seqdsl/ir/support.py, the
    same ones the planner reads; the key is computed as for the first model using the mixer
    (the width only matters for `heads = auto`, which no backend constrains)."""
    m = ctx.mixer
    d_model = ctx.models[0].d_model if ctx.models else m.head_dim
    try:
        key = kernel_key(m, d_model)
    except (LayoutError, ValueError):
        return []  # the heads do not fit: M003 reports it
    verdicts = support.fast_paths(key)
    return [] if any(v.ok for v in verdicts) else verdicts


@rule("W002", "chunk-tiling", "W", "warning")
def chunk_tiling(ctx: MixerContext):
    """Chunk sizes the Triton kernels cannot tile run on the reference path.

    Why: the generated Triton kernels for chunk selection process a chunk as one tile whose
    size is a power of two from 16 to 128 (tl.arange needs a power of two; tensor-core tiles
    are multiples of 16; the backward holds a whole chunk's keys and gradients in one program).
    Any other size is still correct, but runs on the PyTorch reference path, which
    materialises T x T scores: slow and memory-hungry at long context. The rule reads the
    generated kernels' support table (seqdsl/ir/support.py), as the planner does.

    Paper: the Top-1 chunk mixers use chunks of 128.

    Fix: a power of two from 16 to 128, e.g. `chunk(128)`."""
    sel = ctx.mixer.select
    if isinstance(sel, nodes.Top) and isinstance(sel.over, nodes.Chunk) and support.chunk_tiling(sel.over.size):
        yield Finding(
            f"{support.chunk_tiling(sel.over.size)}; the reference (PyTorch) path is used",
            ctx.span("select", "over", "size"), "speed: the reference path materialises T x T scores",
            "a power of two from 16 to 128, e.g. 128")


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

    Paper: the paper's models use head dims of 64 and 128.

    Fix: the message names what rules each backend out; e.g. `head_dim = 64`."""
    for refusal in _fast_path_refusals(ctx):
        if not refusal.tiling:
            yield Finding(
                f"no fast path: {refusal.backend} cannot run it ({refusal.reason}); the reference "
                "(PyTorch) path is used", ctx.span("head_dim"),
                "speed: the reference path is slow at long context",
                "change what the message names, e.g. `head_dim = 64`")


@rule("W004", "context-not-multiple-of-chunk", "W", "info")
def context_not_multiple_of_chunk(ctx: MixerContext):
    """The context is not a whole number of chunks: the last chunk is partial.

    Why: chunk selection and chunk-local attention split the sequence into chunks; when the
    context is not a multiple of the chunk size the last chunk is shorter. This is handled
    (kernels mask the tail), but it means the last tokens have a smaller local chunk than the
    others, which is worth knowing when comparing runs.

    Paper: 2K and 100K contexts with chunks of 128 (2048 = 16 x 128).

    Fix: a chunk size that divides the context."""
    for size, path, what in _chunk_sizes(ctx.mixer):
        if ctx.context % size:
            yield Finding(
                f"{ctx.ctx} is not a multiple of {what}({size}): the last chunk holds "
                f"{ctx.context % size} tokens",
                ctx.span(*path), "the last chunk is partial",
                "a chunk size that divides the context")


@rule("W005", "inert-parameter", "W", "warning")
def inert_parameter(ctx: MixerContext):
    """A parameter that has no effect with the other choices made.

    Why: a spec is read by people; a parameter that silently does nothing suggests an
    experiment that is not happening. `score` and `local` apply to chunk selection only;
    `value_grad` applies to element selection trained with `grad = ste`.

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
    if sel.value_grad == "soft" and (not element or sel.grad == "none"):
        why = "chunk selection" if not element else "`grad = none`"
        yield Finding(f"`value_grad = soft` has no effect with {why}",
                      ctx.span("select", "value_grad"), "the spec says more than the mixer does",
                      "remove `value_grad`")
