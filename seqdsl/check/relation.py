"""Pillar R, real relation calculation: do mixing weights come from query-key content?

Selection is only *arbitrary* if the mixer can compare the query's content with each key's
content: keys that ignore their token (random or constant keys), weights that depend on
positions only, or selections made on averages all weaken or remove that comparison.
"""

from __future__ import annotations

from seqdsl.check.registry import Finding, MixerContext, rule
from seqdsl.ir import nodes


# why R001/R002 findings matter, in the principle's words
CONTENT_WHY = "real relation calculation: weights must come from query-key content"


@rule("R001", "content-free-keys", "R", "error")
def content_free_keys(ctx: MixerContext):
    """Keys not computed from the key token's content cannot express a relation.

    Why: arbitrary selection means a query picks the earlier token whose *content* matches.
    With `random_keys` each position gets a frozen random key, so the score q_i . r_j depends on
    the query and the key's position, never on what token j says; with `const_keys` every key
    is the same vector, so no key can stand out at all.

    Paper: replacing the keys by random constants (the relation ablation) degrades OOD loss
    severely, the clearest evidence that the relation pillar is necessary.

    Fix: `relation = dot` (scaled dot product of learned projections of both tokens)."""
    rel = ctx.mixer.relation
    if isinstance(rel, nodes.RandomKeys):
        yield Finding(
            f"random_keys(seed={rel.seed}): keys are frozen random vectors, one per position; the "
            f"score depends on the query and the key's position, not on the key token's content",
            ctx.span("relation"),
            CONTENT_WHY,
            "`relation = dot`")
    elif isinstance(rel, nodes.ConstKeys):
        yield Finding(
            "const_keys: every key is the same learned vector; scores ignore the key tokens "
            "entirely",
            ctx.span("relation"),
            CONTENT_WHY,
            "`relation = dot`")


@rule("R002", "position-only-weights", "R", "error")
def position_only_weights(ctx: MixerContext):
    """Weights that depend on positions only cannot select by content.

    Why: with `relation = positional` the weight of token j for token i is a learned function
    of the distance i - j: the same for every input. Such a mixer is a (long) convolution; it
    can average the past in fixed patterns but never pick the token that matters for this
    input.

    Paper: removing the content dependence of the keys degrades OOD loss severely. The paper
    did not test position-only weights; they remove content from both sides of the relation,
    so this rule treats them like content-free keys (R001).

    Fix: `relation = dot`, with position carried by `position = rope`."""
    if isinstance(ctx.mixer.relation, nodes.Positional):
        yield Finding(
            "positional: the weights are a function of distance only, identical for every input",
            ctx.span("relation"),
            CONTENT_WHY,
            "`relation = dot` with `position = rope`")


@rule("R003", "aggregate-selection", "R", "warning")
def aggregate_selection(ctx: MixerContext):
    """Selecting chunks by their mean key weakens the relation: the best key can be averaged away.

    Why: `top(1, over=chunk(n), score=mean)` scores a chunk by q . mean(k in chunk). A chunk
    that holds one key matching the query perfectly, among n-1 unrelated ones, scores no better
    than a chunk of lukewarm keys: the relation is computed, but on aggregates, so the selection
    is not arbitrary at the element level. The in-chunk attention afterwards is exact.

    Paper: Top-1 chunk Approx (mean-key scores) matches Exact at 2K context but degrades OOD at
    100K context, while retrieval stays equal: a weakened, not absent, relation.

    With chunks of one key the mean key is the key: q . mean(k) = q . k, the selection is
    Exact and nothing is reported.

    What changed: `top(1, over=chunk(1), score=mean)` used to be reported ("one matching key
    among 0 others can be averaged away"); a chunk of one key has nothing to average.

    Fix: `score = max` (Exact: the chunk that holds the query's best single key) or
    `score = lse`."""
    sel = ctx.mixer.select
    if (isinstance(sel, nodes.Top) and isinstance(sel.over, nodes.Chunk) and sel.score == "mean"
            and sel.over.size > 1):
        yield Finding(
            f"top({sel.k}, over=chunk({sel.over.size}), score=mean) picks chunks by the query's "
            f"dot product with the chunk's mean key: one matching key among {sel.over.size - 1} "
            f"others can be averaged away",
            ctx.span("select", "score"),
            "real relation calculation: the selection compares the query with aggregates, not keys",
            "`score = max` (Exact)")


@rule("R004", "untrained-selection", "R", "warning")
def untrained_selection(ctx: MixerContext):
    """Selection without a gradient leaves the relation unlearned (Top-1 element) or learned
    only indirectly.

    Why: the forward pass of top-k selection is a hard argmax, which has no useful derivative.
    With `grad = none` and `top(1, over=element)` the output is exactly one selected value:
    q and k receive no gradient at all, so the query-key relation that drives the choice is
    never trained and stays at its initialisation. With k > 1, or over chunks, the softmax
    among the selected keys still trains q and k, so the relation is learned, only the choice
    itself is not differentiated (reported as info).

    Paper: Top-1 element selection reaches Transformer-level OOD loss when trained with a
    straight-through estimator (forward hard one-hot, backward through the softmax). Whether
    gradient must flow into the selection is left open by the paper; without any gradient to
    q and k there is no relation to speak of.

    Fix: `grad = ste`."""
    sel = ctx.mixer.select
    if not isinstance(sel, nodes.Top) or sel.grad != "none":
        return
    if isinstance(sel.over, nodes.Element) and sel.k == 1:
        yield Finding(
            "top(1, over=element, grad=none): the output is one selected value, so q and k get no "
            "gradient and the relation that drives the selection is never learned",
            ctx.span("select", "grad"),
            "real relation calculation: an untrained query-key relation selects arbitrarily, not by content",
            "`grad = ste`")
    else:
        what = f"chunk({sel.over.size})" if isinstance(sel.over, nodes.Chunk) else "element"
        yield Finding(
            f"top({sel.k}, over={what}, grad=none): the choice is not differentiated; q and k "
            f"still learn through the softmax among the selected keys",
            ctx.span("select", "grad"),
            "real relation calculation: the relation is learned only through the kept keys",
            "`grad = ste` if the selection should learn directly",
            severity="info")
