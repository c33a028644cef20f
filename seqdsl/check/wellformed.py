"""Pillar W, well-formedness: is the spec consistent, and will it run on a fast path?

Unknown primitives, wrong arity and out-of-range values never get this far: the typing pass
rejects them with a located error. These rules catch what is well-typed but contradictory
(W001, an error), what silently does nothing (W005), and what runs but falls back from the
generated Triton kernels / flash backends to the PyTorch reference path (W002, W003, W004).
"""

from __future__ import annotations

from seqdsl.check.registry import Finding, MixerContext, rule
from seqdsl.ir import nodes
from seqdsl.ir.conflicts import conflicts

# Head dims the generated Triton kernels and the flash / fla backends take.
BACKEND_HEAD_DIMS = (16, 32, 64, 128, 256)


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


@rule("W002", "chunk-tiling", "W", "warning")
def chunk_tiling(ctx: MixerContext):
    """Chunk sizes the Triton kernels cannot tile run on the reference path.

    Why: the generated Triton kernels for chunk selection and chunk-local attention process a
    chunk as whole tiles whose sizes are powers of two of at least 16 (tl.arange needs a power
    of two; tensor-core tiles are multiples of 16). Any other size is still correct, but runs
    on the PyTorch reference path, which materialises T x T scores: slow and memory-hungry at
    long context.

    Paper: the Top-1 chunk mixers use chunks of 128.

    Fix: a power of two >= 16, e.g. `chunk(128)`."""
    for size, path, what in _chunk_sizes(ctx.mixer):
        if size < 16 or size & (size - 1):
            yield Finding(
                f"{what}({size}) is not a power of two >= 16: the generated Triton kernels cannot "
                f"tile it; the reference (PyTorch) path is used",
                ctx.span(*path), "speed: the reference path materialises T x T scores",
                "a power of two >= 16, e.g. 128")


def _per_channel_ssm(m: nodes.Mixer) -> bool:
    """Mamba-1's layout: every channel is its own SSM (head_dim 1, per-channel decay)."""
    return (m.head_dim == 1 and m.is_recurrent and isinstance(m.decay, nodes.DataDependentDecay)
            and m.decay.granularity == "vector")


@rule("W003", "backend-head-dim", "W", "warning")
def backend_head_dim(ctx: MixerContext):
    """A head dim the fast backends do not take runs on the reference path.

    Why: the generated Triton kernels (Top-1 family), the flash / SDPA attention backends and
    the flash-linear-attention kernels are compiled for head dims 16, 32, 64, 128 and 256.
    Other head dims are correct but run on the PyTorch reference path. Mamba-1's per-channel
    layout (head_dim 1) is reported as info: mamba-ssm's selective scan takes it where that
    package is installed.

    Paper: the paper's models use head dims of 64 and 128.

    Fix: `head_dim = 64` (or another of 16, 32, 128, 256), adjusting `heads` or `expand`."""
    m = ctx.mixer
    if m.head_dim in BACKEND_HEAD_DIMS:
        return
    if _per_channel_ssm(m):
        yield Finding(
            "head_dim 1 (per-channel SSM, Mamba-1): runs on mamba-ssm's selective scan where it "
            "is installed, else on the reference (PyTorch) path",
            ctx.span("head_dim"), "speed: the reference path is slow at long context",
            "install mamba-ssm on GPU machines", severity="info")
        return
    yield Finding(
        f"head_dim {m.head_dim} is not one of {', '.join(map(str, BACKEND_HEAD_DIMS))}: the "
        f"generated Triton kernels and flash backends do not take it; the reference (PyTorch) "
        f"path is used",
        ctx.span("head_dim"), "speed: the reference path is slow at long context",
        "`head_dim = 64` (or 16, 32, 128, 256)")


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
