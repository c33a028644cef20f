"""Pillar V, full-sequence visibility: can any earlier token be reached in one mixing step?

A mixer fails this pillar when some earlier tokens are out of reach (a window or chunk shorter
than the context), fade away exponentially (decay), or survive only as a lossy summary (a
fixed-size recurrent state). Messages name the concrete reach in tokens and compare it to the
context, because "how much of the past is visible" is what the paper's window ablation varied.
"""

from __future__ import annotations

import math

from seqdsl.check.registry import Finding, MixerContext, count, percent, rule
from seqdsl.ir import nodes
from seqdsl.ir.schedules import alibi_slopes, retnet_horizons


@rule("V001", "finite-window", "V", "error")
def finite_window(ctx: MixerContext):
    """A sliding window shorter than the context hides the tokens beyond it.

    Why: full-sequence arbitrary selection needs every earlier token to be reachable in one
    mixing step. With `window(w)`, token i only sees i-w+1..i; anything further back can only
    arrive indirectly, squeezed through intermediate tokens across layers.

    Paper: a sliding window of 256 at a 2K context degrades out-of-distribution loss clearly;
    larger windows degrade less. A window at least as long as the context is full attention
    and passes.

    Fix: use `visibility = full`, or a window no shorter than the context. To keep attention
    cheap, select instead of truncating: `select = top(1, over=chunk(128))` keeps every token
    reachable."""
    vis = ctx.mixer.visibility
    if isinstance(vis, nodes.Window) and vis.size < ctx.context:
        yield Finding(
            f"window({vis.size}) lets a token see the last {vis.size} tokens, "
            f"{percent(vis.size, ctx.context)} of {ctx.ctx}; tokens further back cannot be "
            f"selected in one step",
            ctx.span("visibility", "size"),
            "full-sequence visibility: any earlier token must be reachable in one mixing step",
            f"`visibility = full`, or a window of at least {ctx.context} tokens")


@rule("V002", "chunk-local-visibility", "V", "error")
def chunk_local_visibility(ctx: MixerContext):
    """Chunk-local visibility confines each token to its own chunk.

    Why: with `chunk_local(c)` token i sees only the earlier tokens of its own chunk of c, on
    average c/2 of them; everything in earlier chunks is unreachable, which breaks
    full-sequence visibility more severely than a sliding window of the same size (the first
    token of each chunk sees nothing but itself).

    Paper: visibility limited to a local span degrades OOD loss (the window ablation); the
    Top-1 chunk mixers keep a local chunk but *add* a selected chunk from anywhere in the past,
    which restores full visibility.

    Fix: `visibility = full`; if chunking is for speed, combine full visibility with chunk
    selection: `select = top(1, over=chunk(128), local=true)`."""
    vis = ctx.mixer.visibility
    if isinstance(vis, nodes.ChunkLocal):
        shown = min(vis.size, ctx.context)
        yield Finding(
            f"chunk_local({vis.size}) lets a token see only its own chunk: at most {shown} tokens, "
            f"{percent(shown, ctx.context)} of {ctx.ctx}, none in earlier chunks",
            ctx.span("visibility", "size"),
            "full-sequence visibility: tokens in earlier chunks are out of reach",
            "`visibility = full`, with `select = top(1, over=chunk(...))` if chunking is for speed")


@rule("V003", "exponential-forgetting", "V", "error")
def exponential_forgetting(ctx: MixerContext):
    """Decay forgets the past exponentially: distant tokens fade instead of staying selectable.

    Why: with a decay, the contribution of token j to token i is scaled by a product of decay
    factors over i-j steps. A constant decay gamma has a horizon of about 1/(1-gamma) tokens;
    beyond a few horizons a token is numerically gone, however relevant its content. A
    data-dependent decay can stretch the horizon when its gates stay near 1, but nothing bounds
    how fast it forgets: a gate near 0 erases the whole past, and the horizon depends on the
    input, so arbitrary selection of an old token is never guaranteed.

    Paper: the stateful mixers with decay (Mamba-1/2, RWKV-6/7, GLA, Gated DeltaNet) all degrade
    OOD relative to Transformer++. Removing Mamba's decay changes convergence speed but not the
    degradation, because the fixed-size state (V004) and linear weights (N001) remain: decay is
    one cause, not the only one.

    Fix: `decay = none`. If the mixer needs a recency bias, let the scores carry it (`position =
    rope`) and keep full visibility with softmax weights."""
    decay = ctx.mixer.decay
    if isinstance(decay, nodes.ConstantDecay):
        yield _constant(ctx, decay)
    elif isinstance(decay, nodes.DataDependentDecay):
        per = "one gate per head" if decay.granularity == "scalar" else "one gate per key channel"
        yield Finding(
            f"data_dependent({decay.granularity}) decay ({per}): the horizon is input-dependent "
            f"and unbounded forgetting is possible; no token of {ctx.ctx} is guaranteed to stay "
            f"selectable",
            ctx.span("decay"),
            "full-sequence visibility: decayed tokens fade exponentially with distance",
            "`decay = none`; carry recency in the scores (`position = rope`) instead")


def _constant(ctx: MixerContext, decay: nodes.ConstantDecay) -> Finding:
    why = "full-sequence visibility: a constant decay gamma fades a token d steps back by gamma^d"
    fix = "`decay = none`; carry recency in the scores (`position = rope`) instead"
    T = ctx.context
    if decay.gamma != "auto":
        g = decay.gamma
        horizon = 1.0 / (1.0 - g)
        far = g ** (T - 1)
        return Finding(
            f"constant decay gamma={g} forgets with a horizon of 1/(1-gamma) = {horizon:.4g} tokens "
            f"({percent(min(horizon, T), T)} of {ctx.ctx}); a token {T - 1} steps back is weighted "
            f"by {g}^{T - 1} = {far:.2g}",
            ctx.span("decay", "gamma"), why, fix)
    heads = ctx.heads
    if heads is None:
        return Finding(
            "constant decay with RetNet's schedule gamma_h = 1 - 2^(-5-h): head h forgets with a "
            "horizon of 2^(5+h) tokens (32 for head 0); the number of heads is not known here "
            "(heads = auto and no model fixes d_model), so the longest horizon cannot be named",
            ctx.span("decay"), why, fix)
    horizons = retnet_horizons(heads)
    longest = horizons[-1]
    if longest < T:
        tail = (f"the longest, {longest:.0f} tokens (head {heads - 1}), is "
                f"{percent(longest, T)} of {ctx.ctx}")
    else:
        # Even a horizon past the context leaves most heads short-sighted.
        short = sum(h < T for h in horizons)
        tail = (f"the longest, {longest:.0f} tokens (head {heads - 1}), reaches past {ctx.ctx}, "
                f"but {short} of {heads} heads forget within it")
    return Finding(
        f"constant decay with RetNet's schedule gamma_h = 1 - 2^(-5-h) over {heads} heads: "
        f"horizons 1/(1-gamma_h) from 32 to {longest:.0f} tokens; {tail}",
        ctx.span("decay"), why, fix)


def _state_rows(mixer: nodes.Mixer, key_dim: int) -> int:
    """Rows of the recurrent state: the feature dimension of phi(k)."""
    feature = getattr(mixer.relation, "feature", "identity")
    if feature == "taylor":  # Based: phi(x) = [1, x, (x outer x)/sqrt(2)]
        return 1 + key_dim + key_dim * key_dim
    return key_dim


@rule("V004", "fixed-size-state", "V", "error")
def fixed_size_state(ctx: MixerContext):
    """A fixed-size recurrent state must compress the whole prefix.

    Why: linear weights (the linear-attention / SSM / RNN family) make the mixer a recurrence:
    each head carries a state of key_dim x head_dim numbers, and every earlier token is folded
    into it. Once the prefix holds more than the state can store, exact recall of an arbitrary
    earlier token is impossible: the information is mixed with everything else, whatever the
    update rule (additive, delta, RWKV-7). Softmax attention instead keeps every key and value,
    so the memory grows with the context.

    Paper: every stateful mixer tested (Mamba-1/2, RWKV-6/7, GLA, Gated DeltaNet, linear
    attention, Based) degrades OOD relative to Transformer++, including Mamba-2 with its decay,
    convolution or GroupNorm removed.

    Fix: `weights = softmax` (and `update`, `decay` back to their defaults); to keep the cost
    down select a few chunks: `select = top(1, over=chunk(128))` reaches Transformer-level
    OOD loss in the paper."""
    if not ctx.mixer.is_recurrent:
        return
    m = ctx.mixer
    rows = _state_rows(m, ctx.key_dim)
    per_head = rows * m.head_dim
    shape = f"{rows} x {m.head_dim}"
    if rows != ctx.key_dim:
        shape = f"(1 + {ctx.key_dim} + {ctx.key_dim}^2) x {m.head_dim} = {rows} x {m.head_dim}"
    heads = ctx.heads
    layer = f"{heads} heads: {count(heads * per_head)} per layer" if heads else "heads unknown here"
    kv = ctx.context * (ctx.key_dim + m.head_dim)
    yield Finding(
        f"`{m.weights.kind}` weights run as a recurrence: the whole prefix is compressed into a "
        f"{shape} state per head ({count(per_head)} numbers; {layer}), while softmax attention "
        f"over {ctx.ctx} keeps all keys and values ({count(kv)} numbers per head); no exact "
        f"arbitrary recall once the sequence outgrows the state",
        ctx.span("weights"),
        "full-sequence visibility: earlier tokens survive only as a lossy summary",
        "`weights = softmax` (cheap variant: `select = top(1, over=chunk(128))`)")


@rule("V005", "distance-penalty", "V", "warning")
def distance_penalty(ctx: MixerContext):
    """ALiBi's linear distance penalty biases every head against far tokens.

    Why: ALiBi subtracts slope_h x (i - j) from every score. To select a token d steps back
    over a neighbour, its content score must beat the neighbour's by slope_h x d, a margin that
    grows without bound with distance. The gentlest head (slope 2^-8) already scales a token
    2048 steps back by e^-8 relative to an equal-scoring neighbour: distant tokens stay visible
    but are hard to select, a soft window of about 1/slope tokens per head.

    Paper: among Mamba's components, positional encoding changed convergence speed but not
    base capability, with ALiBi the exception: it hurts. This rule reports ALiBi as degraded
    (a warning), not failed: content can still overcome the penalty.

    Fix: `position = rope` (relative position without a distance penalty) or `position = none`."""
    if not isinstance(ctx.mixer.position, nodes.Alibi):
        return
    heads = ctx.heads
    slopes = alibi_slopes(heads) if heads else [2.0 ** -8]
    gentle, steep = min(slopes), max(slopes)
    far = ctx.context - 1
    steep_part = f", the steepest (slope {steep:.3g}) by e^-{steep * far:.4g}" if heads else ""
    yield Finding(
        f"ALiBi penalises distance linearly: the gentlest head (slope 2^-8) scales a token {far} "
        f"steps back by e^-{gentle * far:.3g} = {math.exp(-gentle * far):.2g} relative to an "
        f"equal-scoring neighbour{steep_part}; its effective reach, 1/slope = {1 / gentle:.0f} "
        f"tokens, is {percent(min(1 / gentle, ctx.context), ctx.context)} of {ctx.ctx}",
        ctx.span("position"),
        "full-sequence visibility: far tokens are visible but penalised in proportion to distance",
        "`position = rope`")
