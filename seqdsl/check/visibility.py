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
from seqdsl.ir.schedules import alibi_slopes, retnet_log_gammas


@rule("V001", "finite-window", "V", "error")
def finite_window(ctx: MixerContext):
    """A sliding window shorter than the context hides the tokens beyond it.

    Why: full-sequence arbitrary selection needs every earlier token to be reachable in one
    mixing step. With `window(w)`, token i only sees i-w+1..i; anything further back can only
    arrive indirectly, squeezed through intermediate tokens across layers.

    Paper: a sliding window of 256 at a 2K context degrades out-of-distribution loss clearly;
    larger windows degrade less. A window at least as long as the context is full attention
    and passes.

    Sink tokens (`window(w, sink=n)`) keep the first n tokens visible too, and that is all:
    every token between the sinks and the window stays out of reach, so the verdict stands
    unless w + n reaches the context (then the window and the sinks meet).

    Fix: use `visibility = full`, or a window no shorter than the context. To keep attention
    cheap, select instead of truncating: `select = top(1, over=chunk(128))` keeps every token
    reachable."""
    vis = ctx.mixer.visibility
    if isinstance(vis, nodes.Window) and vis.size + vis.sink < ctx.context:  # else window and sinks meet
        seen = (f"the last {vis.size} tokens and the first {vis.sink}, at most "
                f"{percent(vis.size + vis.sink, ctx.context)}" if vis.sink else
                f"the last {vis.size} tokens, {percent(vis.size, ctx.context)}")
        yield Finding(
            f"window({vis.size}) lets a token see {seen} of {ctx.ctx}; tokens further back cannot be "
            f"selected in one step",
            ctx.span("visibility", "size"),
            "full-sequence visibility: any earlier token must be reachable in one mixing step",
            f"`visibility = full`, or a window of at least {ctx.context} tokens")


@rule("V002", "chunk-local-visibility", "V", "error")
def chunk_local_visibility(ctx: MixerContext):
    """Chunk-local visibility shorter than the context confines each token to its own chunk.

    Why: with `chunk_local(c)` token i sees only the earlier tokens of its own chunk of c, on
    average c/2 of them; everything in earlier chunks is unreachable, which breaks
    full-sequence visibility more severely than a sliding window of the same size (the first
    token of each chunk sees nothing but itself). A chunk at least as long as the context is
    one chunk: every token sees its whole prefix, which is full visibility.

    Paper: visibility limited to a local span degrades OOD loss (the window ablation); the
    Top-1 chunk mixers keep a local chunk but *add* a selected chunk from anywhere in the past,
    which restores full visibility.

    What changed: `chunk_local(2048)` at a 2048-token context used to fail while `window(2048)`
    passed, although both let every token see its whole prefix. Like V001, V002 now compares
    the size with the context: equal visibility at the context, equal verdict.

    Fix: `visibility = full`; if chunking is for speed, combine full visibility with chunk
    selection: `select = top(1, over=chunk(128), local=true)`."""
    vis = ctx.mixer.visibility
    if isinstance(vis, nodes.ChunkLocal) and vis.size < ctx.context:
        yield Finding(
            f"chunk_local({vis.size}) lets a token see only its own chunk: at most {vis.size} "
            f"tokens, "
            f"{percent(vis.size, ctx.context)} of {ctx.ctx}, none in earlier chunks",
            ctx.span("visibility", "size"),
            "full-sequence visibility: tokens in earlier chunks are out of reach",
            "`visibility = full`, with `select = top(1, over=chunk(...))` if chunking is for speed")


@rule("V003", "exponential-forgetting", "V", "error")
def exponential_forgetting(ctx: MixerContext):
    """A decay whose horizon is shorter than the context forgets the past: distant tokens fade.

    Why: with a decay, the contribution of token j to token i is scaled by a product of decay
    factors over i-j steps. A constant decay gamma = e^-r fades a token d steps back by e^(-r d):
    its horizon is 1/r = 1/|ln gamma| tokens (the distance over which the weight falls by e).
    As V001 judges a window, the decay is judged by its longest horizon (per head: RetNet's
    schedule, seqdsl/ir/schedules.py) against the context: a horizon that covers the context
    keeps the oldest token within a factor e of an equal-scoring neighbour, a recency bias
    rather than forgetting (reported as info). A shorter horizon forgets; how badly depends on
    the weights. Under softmax the decay is a score bias of -r d, exactly ALiBi with slope r,
    which content can still overcome: degraded, as V005 grades ALiBi. In a recurrence (linear
    weights) the state itself shrinks by e^(-r d) and no query can bring the token back: fail.

    A data-dependent decay is explained, not failed: its gates are learned, and can learn to
    stay near 1 and keep everything (under softmax this is a learned recency bias, as in the
    Forgetting Transformer). For the recurrent family the pillars that fail are the fixed-size
    state (V004) and linear weights (N001), which this rule does not excuse.

    Paper: the stateful mixers with decay (Mamba-1/2, RWKV-6/7, GLA, Gated DeltaNet) all degrade
    OOD relative to Transformer++. The Mamba ablations found that data-dependent decay affects
    convergence speed, not base capability: removing Mamba-2's decay leaves the degradation,
    because the fixed-size state (V004) and linear weights (N001) remain.

    What changed: V003 used to fail every decay, including `constant(0.9999)` at a 2048-token
    context, whose oldest token keeps weight 0.81, and every data-dependent decay. It now judges
    a constant decay by its horizon against the context (severity by weights family: info when
    it covers the context, warning under softmax, error in a recurrence) and reports a
    data-dependent decay as info. Horizons are now 1/|ln gamma|, the same measure as ALiBi's
    1/slope (RetNet's head h: 2^(5+h) - 0.5 tokens, where 1/(1-gamma) gave 2^(5+h)). Every
    decay kind is handled explicitly; an unknown kind raises instead of passing silently.

    Fix: `decay = none`, or a constant decay with a horizon of at least the context. If the
    mixer needs a recency bias, let the scores carry it (`position = rope`) and keep full
    visibility with softmax weights."""
    decay = ctx.mixer.decay
    if isinstance(decay, nodes.NoDecay):
        return
    if isinstance(decay, nodes.ConstantDecay):
        yield _constant(ctx, decay)
    elif isinstance(decay, nodes.DataDependentDecay):
        yield _data_dependent(ctx, decay)
    else:
        raise TypeError(f"V003 does not handle decay {decay!r}: judge the new kind explicitly")


FORGET_WHY = "full-sequence visibility: a decayed token fades exponentially with distance"
FORGET_FIX = "`decay = none`; carry recency in the scores (`position = rope`) instead"


def _short_horizon_severity(mixer: nodes.Mixer) -> str:
    """How much a horizon shorter than the context costs, by weights family."""
    if isinstance(mixer.weights, nodes.Softmax):
        return "warning"  # a score bias, like ALiBi: content can overcome it
    if isinstance(mixer.weights, (nodes.Linear, nodes.NormalizedLinear)):
        return "error"  # the state itself forgets
    raise TypeError(f"unhandled weights {mixer.weights!r}")


def _horizon_verdict(ctx: MixerContext, longest: float) -> tuple[str, str]:
    """(severity, sentence) for a per-step distance penalty whose longest horizon is `longest`."""
    T = ctx.context
    if longest >= T - 1:
        return "info", (f"the horizon covers {ctx.ctx}: the oldest token keeps at least e^-1 of "
                        f"an equal-scoring neighbour's weight, a recency bias, not forgetting")
    severity = _short_horizon_severity(ctx.mixer)
    share = f"the horizon is {percent(longest, T)} of {ctx.ctx}"
    if severity == "warning":
        return severity, (f"{share}; under softmax this is a score penalty linear in distance: "
                          f"distant tokens stay visible but content must outscore the penalty to "
                          f"select them")
    return severity, f"{share}; the recurrent state forgets older tokens, no query can recover them"


def _tokens(n: float) -> str:
    """`99.5`, `8,191`: a horizon in tokens, readable at every size."""
    return f"{n:.4g}" if n < 1000 else count(round(n))


def _constant(ctx: MixerContext, decay: nodes.ConstantDecay) -> Finding:
    T = ctx.context
    if decay.gamma != "auto":
        g = decay.gamma
        reach = -1.0 / math.log(g)
        severity, verdict = _horizon_verdict(ctx, reach)
        return Finding(
            f"constant decay gamma={g} forgets with a horizon of 1/|ln gamma| = "
            f"{_tokens(reach)} tokens; "
            f"a token {T - 1} steps back keeps {g}^{T - 1} = {g ** (T - 1):.2g} of an "
            f"equal-scoring neighbour's weight; {verdict}",
            ctx.span("decay", "gamma"), FORGET_WHY, FORGET_FIX, severity=severity)
    heads = ctx.heads
    if heads is None:
        # Head h reaches about 2^(5+h) tokens: the context needs enough heads, unknown here.
        needed = max(1, math.ceil(math.log2(T)) - 4)
        return Finding(
            f"constant decay with RetNet's schedule gamma_h = 1 - 2^(-5-h): head h forgets with a "
            f"horizon of about 2^(5+h) tokens (31.5 for head 0); the number of heads is not known "
            f"here (heads = auto and no model fixes d_model), so it cannot be shown that any head "
            f"reaches {ctx.ctx} (that takes at least {needed} heads)",
            ctx.span("decay"), FORGET_WHY, FORGET_FIX, severity=_short_horizon_severity(ctx.mixer))
    horizons = [-1.0 / lg for lg in retnet_log_gammas(heads)]
    longest = horizons[-1]
    short = sum(h < T - 1 for h in horizons)
    severity, verdict = _horizon_verdict(ctx, longest)
    return Finding(
        f"constant decay with RetNet's schedule gamma_h = 1 - 2^(-5-h) over {heads} heads: "
        f"horizons 1/|ln gamma_h| from {_tokens(horizons[0])} to {_tokens(longest)} tokens "
        f"({short} of {heads} heads forget within the context); for the longest (head "
        f"{heads - 1}), {verdict}",
        ctx.span("decay"), FORGET_WHY, FORGET_FIX, severity=severity)


def _data_dependent(ctx: MixerContext, decay: nodes.DataDependentDecay) -> Finding:
    per = {"scalar": "one gate per head", "vector": "one gate per key channel",
           "selective": "one step size per head times a fixed rate per key channel"}[decay.granularity]
    w = ctx.mixer.weights
    if isinstance(w, nodes.Softmax) and decay.granularity in ("vector", "selective"):
        family = ("a softmax score has no key channels to decay separately (W001 reports the "
                  "conflict); as a per-head gate it would be a learned recency bias")
    elif isinstance(w, nodes.Softmax):
        family = ("under softmax it is a learned recency bias on the scores (a Forgetting "
                  "Transformer); gates that learn to stay near 1 keep every token selectable")
    elif isinstance(w, (nodes.Linear, nodes.NormalizedLinear)):
        family = ("gates that learn to stay near 1 keep the past in the state; what fails here is "
                  "the fixed-size state (V004) and linear weights (N001), not the decay")
    else:
        raise TypeError(f"unhandled weights {w!r}")
    return Finding(
        f"data_dependent({decay.granularity}) decay ({per}): the horizon is learned and "
        f"input-dependent; {family}. The paper's Mamba ablations found data-dependent decay "
        f"affects convergence speed, not base capability",
        ctx.span("decay"), FORGET_WHY, "nothing to fix for the decay itself", severity="info")


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

    What changed: ALiBi is a constant decay gamma_h = e^-slope_h (the lowering applies it as one
    in a recurrence), so V005 now judges it exactly as V003 judges a constant decay: by its
    longest horizon, 1/slope = 256 tokens, against the context. A warning under softmax when the
    horizon is shorter than the context (unchanged at 2048 tokens), an error in a recurrence
    (the state forgets), an info when the horizon covers the context (contexts up to 257).

    Fix: `position = rope` (relative position without a distance penalty) or `position = none`."""
    if not isinstance(ctx.mixer.position, nodes.Alibi):
        return
    heads = ctx.heads
    slopes = alibi_slopes(heads) if heads else [2.0 ** -8]
    gentle, steep = min(slopes), max(slopes)
    far = ctx.context - 1
    steep_part = f", the steepest (slope {steep:.3g}) by e^-{steep * far:.4g}" if heads else ""
    severity, verdict = _horizon_verdict(ctx, 1 / gentle)
    yield Finding(
        f"ALiBi penalises distance linearly: the gentlest head (slope 2^-8) scales a token {far} "
        f"steps back by e^-{gentle * far:.3g} = {math.exp(-gentle * far):.2g} relative to an "
        f"equal-scoring neighbour{steep_part}; its horizon is 1/slope = {1 / gentle:.0f} tokens: "
        f"{verdict}",
        ctx.span("position"),
        "full-sequence visibility: far tokens are visible but penalised in proportion to distance",
        "`position = rope`", severity=severity)
