"""Pillar N, non-uniform distribution: can the mixing weights concentrate sharply?

Selecting one token out of thousands needs weights that can put almost all their mass on it.
Softmax does this (exponentially, and more so at low temperature); weights linear in the scores
do not, and constant scores cannot.
"""

from __future__ import annotations

from seqdsl.check.registry import Finding, MixerContext, count, rule
from seqdsl.check.sharpness import sharpness
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
    """A softmax flatter than the standard scaled dot product, or one whose logits QK-norm caps.

    Why: sharpness depends on the effective logit scale, scale x (q.k) / temperature, wherever
    it comes from (seqdsl/check/sharpness.py computes it once for every rule). Relative to the
    standard q.k / sqrt(Dk) at temperature 1, the effective inverse temperature is
    beta = scale x sqrt(Dk) / T: `softmax(temperature = 2)` and `dot(scale = 1/(2 sqrt(Dk)))`
    are the same mixer (beta = 1/2), and with beta < 1 the model must learn 1/beta times larger
    score gaps to select one token. With `qk_norm`, q and k are RMS-normalised, so the logits
    are bounded: |logit| <= L = |scale| x g^2 x Dk / T, g the RMSNorm gain. The checker assumes
    g = 1, its initial value (the gains are learnable and can lift the bound; the message says
    so). Over N keys one key can then take at most 1 / (1 + (N-1) e^(-2L)) of the weight; below
    one half, no key can outweigh the others together. Cosine scores (`qk_norm` with
    scale = 1/Dk, L = 1) cap it near 0.004 over 2048 keys.

    Top-1 element selection is the exception: its forward is an arg-max, o_i = v at the best
    key, which no positive temperature or scale changes. The temperature (and scale) then only
    shape the straight-through backward, whose surrogate is softmax(s / T) over the visible keys:
    a higher temperature spreads the gradient over more keys and scales it by 1/T. This is
    reported as an info, not a flattened distribution; with `grad = none` the temperature has no
    effect at all.

    Paper: the temperature ablation found that a lower softmax temperature helps OOD loss and
    a flatter one (T > 1) hurts: the distribution pillar is graded, not binary.

    What changed: N002 used to read the temperature alone, so `dot(scale = 0.001)` passed while
    `temperature = 2` was degraded, `dot(qk_norm = true)` with cosine-sized logits passed, and
    top(1) over elements with `temperature = 4` was called flatter although its forward is an
    arg-max. It now judges beta and the QK-norm bound together, the same for every spelling.
    Note: `dot(qk_norm = true, scale = 1.0)` is *not* capped here: the lowering RMS-normalises
    (|q| = sqrt(Dk)), so its logits reach +-Dk (64 at Dk = 64), sharper than standard.

    Fix: `weights = softmax` (T = 1) with `scale = auto`, or a lower temperature, e.g.
    `softmax(temperature=0.5)`; with `qk_norm`, keep `scale = auto` (L = sqrt(Dk))."""
    m = ctx.mixer
    if not isinstance(m.weights, nodes.Softmax):
        return  # linear weights: N001
    rel = m.relation
    if isinstance(rel, nodes.ConstKeys) or (isinstance(rel, nodes.Dot) and rel.scale == 0):
        return  # all scores equal: N003 reports the uniform weights
    s = sharpness(ctx.mixer, ctx.key_dim, ctx.context)
    causes = []
    if s.flattened:
        causes.append(f"{_spelling(m, ctx.key_dim)} gives an effective inverse temperature of "
                      f"{s.inverse_temperature:.3g} relative to q.k/sqrt({ctx.key_dim}) at "
                      f"temperature 1: score gaps count {1 / s.inverse_temperature:.3g} times less")
    if s.capped:
        causes.append(f"qk_norm bounds every logit to +-{s.logit_bound:.3g} (|scale| x g^2 x "
                      f"{ctx.key_dim} / T, assuming the learnable RMSNorm gains g of q and k stay "
                      f"at their initial 1), so one key can take at most {s.max_weight:.2g} of "
                      f"the weight over {count(s.keys)} keys")
    if not causes:
        return
    span = (ctx.span("weights", "temperature") if m.weights.temperature != 1
            else ctx.span("relation", "scale") or ctx.span("relation"))
    sel = m.select
    if isinstance(sel, nodes.Top) and isinstance(sel.over, nodes.Element) and sel.k == 1:
        effect = ("has no effect: the choice carries no gradient" if sel.grad == "none" else
                  "only shapes the straight-through backward, whose surrogate softmax spreads "
                  "the gradient over more keys")
        yield Finding(
            f"top(1) over elements: the forward is an arg-max, which no temperature or scale "
            f"changes; {'; '.join(causes)}: this {effect}",
            span, "non-uniform distribution: the forward output is one selected value",
            "nothing to fix for the forward; `temperature = 1.0` for the standard surrogate",
            severity="info")
        return
    yield Finding(
        "; ".join(causes) + ": the weights are flatter than a standard softmax's",
        span,
        "non-uniform distribution: a flattened softmax concentrates less",
        "`temperature = 1.0` (or lower) with `scale = auto`")


def _spelling(m: nodes.Mixer, key_dim: int) -> str:
    """How the spec sets the logit scale, in its own words."""
    def shown(value) -> str:  # a learned value is judged where it starts, and says so
        if isinstance(value, nodes.Learned):
            return f"learned({value.init:g}), judged at its initial value"
        return f"{value:g}"

    parts = []
    if isinstance(m.relation, nodes.Dot) and m.relation.scale != "auto":
        parts.append(f"dot(scale={shown(m.relation.scale)}) at Dk = {key_dim}")
    if isinstance(m.weights, nodes.Softmax) and m.weights.temperature != 1:
        parts.append(f"softmax(temperature={shown(m.weights.temperature)})")
    return " with ".join(parts) or "the spec"


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
