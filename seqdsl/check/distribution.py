"""Pillar N, non-uniform distribution: can the mixing weights concentrate sharply?

Selecting one token out of thousands needs weights that can put almost all their mass on it.
Softmax does this (exponentially, and more so at low temperature); weights linear in the scores
do not, and constant scores cannot.
"""

from __future__ import annotations

from seqdsl.check.registry import Finding, MixerContext, rule
from seqdsl.ir import nodes


@rule("N001", "linear-weights", "N", "error")
def linear_weights(ctx: MixerContext):
    """Weights linear in the scores cannot sharpen onto one token.

    Why: with `weights = linear` (w_ij = score_ij) or `normalized_linear` (w_ij = score_ij /
    sum_l score_il) a key that scores twice as high gets twice the weight, never a thousand
    times: the weights spread over every visible token in proportion to the scores. Picking
    one token out of thousands needs the exponential sharpening of softmax.

    Paper: every mixer with linear weights it tested (linear attention, Based, Mamba-1/2,
    RWKV-6/7, GLA, Gated DeltaNet) degrades OOD relative to Transformer++, and even a softmax
    mixer degrades when its distribution is flattened (N002).

    Fix: `weights = softmax` (this also removes the fixed-size state, V004)."""
    w = ctx.mixer.weights
    if isinstance(w, (nodes.Linear, nodes.NormalizedLinear)):
        how = ("w_ij = score_ij" if isinstance(w, nodes.Linear)
               else "w_ij = score_ij / sum_l score_il")
        yield Finding(
            f"`{w.kind}` weights ({how}) grow only in proportion to the scores: no softmax-like "
            f"sharpening onto a single token",
            ctx.span("weights"),
            "non-uniform distribution: weights must be able to concentrate sharply",
            "`weights = softmax`")


@rule("N002", "flattened-softmax", "N", "warning")
def flattened_softmax(ctx: MixerContext):
    """A softmax temperature above 1 flattens the weights.

    Why: softmax(s / T) with T > 1 divides every score gap by T, so the distribution is flatter
    than the learned scores ask for: to select one token the model must learn T times larger
    score gaps. Lower temperatures concentrate more.

    Paper: the temperature ablation found that a lower softmax temperature helps OOD loss and
    a flatter one (T > 1) hurts: the distribution pillar is graded, not binary.

    Fix: `weights = softmax` (T = 1) or a lower temperature, e.g. `softmax(temperature=0.5)`."""
    w = ctx.mixer.weights
    t = nodes.initial_value(w.temperature) if isinstance(w, nodes.Softmax) else 1.0
    if t > 1:
        # a learned temperature is judged from where it starts: training may move it either way
        learned = (f"temperature=learned({t:g})) starts at {t:g} and is learned; it"
                   if isinstance(w.temperature, nodes.Learned) else f"temperature={t:g})")
        yield Finding(
            f"softmax({learned} divides every score gap by {t:g}: "
            f"the weights are flatter than the scores",
            ctx.span("weights", "temperature"),
            "non-uniform distribution: a flattened softmax concentrates less",
            "`temperature = 1.0` or lower")


@rule("N003", "uniform-weights", "N", "error")
def uniform_weights(ctx: MixerContext):
    """Scores that are all equal give uniform weights: a plain average of the past.

    Why: with `relation = const_keys` every key is the same vector, so every visible token gets
    the same score and softmax (or any normalisation) spreads the weight evenly; a dot product
    with `scale = 0` does the same. The mixer then averages the prefix: nothing can be
    selected, however sharp the weighting function.

    Paper: the constant-key ablation removes both the relation (R001) and, with it, any
    non-uniformity; it degrades OOD loss severely.

    Fix: `relation = dot` with a non-zero scale (`scale = auto`)."""
    rel = ctx.mixer.relation
    if isinstance(rel, nodes.ConstKeys):
        cause = "const_keys gives every key the same score"
        span = ctx.span("relation")
    elif isinstance(rel, nodes.Dot) and rel.scale == 0:
        cause = "dot(scale=0) makes every score zero"
        span = ctx.span("relation", "scale")
    else:
        return
    yield Finding(
        f"{cause}: the `{ctx.mixer.weights.kind}` weights are uniform over the visible tokens, an "
        f"average of the past",
        span,
        "non-uniform distribution: equal scores cannot single out a token",
        "`relation = dot` (scale = auto)")
