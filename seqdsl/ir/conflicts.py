"""Combinations of slot choices that describe no mixer, or none that seqdsl can build.

One torch-free list, read by the checker (rule W001, which reports each with its span) and by
the lowering (MixerModule refuses to build such a mixer), so `seqdsl check` and `seqdsl lower`
always agree on what is buildable.
"""

from __future__ import annotations

from dataclasses import dataclass

from seqdsl.ir import nodes

# Features whose dot products are never negative (taylor: 1 + x + x^2/2 > 0).
NONNEGATIVE_FEATURES = ("elu1", "relu", "taylor")
# Features whose phi(k) is wider than k (seqdsl.ir.key.feature_width): taylor's 1 + d + d^2.
WIDENING_FEATURES = ("taylor",)


@dataclass(frozen=True)
class Conflict:
    message: str
    where: tuple[str, ...]  # slot (and parameter) path of the most telling text
    fix: str


def conflicts(m: nodes.Mixer) -> list[Conflict]:
    """Every conflict in `m`, most fundamental first."""
    out: list[Conflict] = []
    softmax = isinstance(m.weights, nodes.Softmax)
    feature = getattr(m.relation, "feature", "identity")
    top = m.select if isinstance(m.select, nodes.Top) else None
    chunked = top is not None and isinstance(top.over, nodes.Chunk)

    # --- one family or the other ---------------------------------------------------------------
    if top and not softmax:
        out.append(Conflict(
            f"`select = top(...)` with `{m.weights.kind}` weights: selection mixes the selected "
            "keys with a softmax", ("select",),
            "`weights = softmax`, or `select = none` for a recurrent mixer"))
    if softmax and (not isinstance(m.update, nodes.Additive) or m.update.bonus):
        shown = "additive(bonus=true)" if isinstance(m.update, nodes.Additive) else m.update.kind
        out.append(Conflict(
            f"`update = {shown}` with softmax weights: state update rules exist only for the "
            "recurrent (linear-weights) family", ("update",),
            "`update = additive`, or linear weights for a recurrent mixer"))
    if softmax and feature != "identity":
        out.append(Conflict(
            f"feature map `{feature}` with softmax weights: feature maps replace the softmax "
            "kernel in linear attention", ("relation", "feature"),
            "`feature = identity`, or linear weights for linear attention"))
    if softmax and isinstance(m.decay, nodes.DataDependentDecay) and m.decay.granularity in ("vector", "selective"):
        out.append(Conflict(
            f"a per-channel ({m.decay.granularity}) decay with softmax weights: a softmax score has no key "
            "channels to decay separately", ("decay",),
            "`decay = data_dependent(scalar)` (a recency bias on the scores), or linear weights"))
    selective = isinstance(m.decay, nodes.DataDependentDecay) and m.decay.granularity == "selective"
    if selective and not softmax and not (isinstance(m.update, nodes.Additive) and not m.update.bonus):
        shown = "additive(bonus=true)" if isinstance(m.update, nodes.Additive) else m.update.kind
        out.append(Conflict(
            f"`decay = data_dependent(selective)` with `update = {shown}`: the selective step is "
            "Mamba-1's discretised SSM, whose step size scales the plain additive write dt k v^T; "
            "it has no meaning for a delta rule, RWKV-6's bonus or RWKV-7's removal", ("decay",),
            "`update = additive`, or `decay = data_dependent(vector)` for a free per-channel decay"))
    per_key_channel = [what for what, present in (
        ("a per-channel decay (`data_dependent(vector)`)",
         isinstance(m.decay, nodes.DataDependentDecay) and m.decay.granularity == "vector"),
        ("RWKV-6's bonus", isinstance(m.update, nodes.Additive) and m.update.bonus),
        ("RWKV-7's update", isinstance(m.update, nodes.Rwkv7))) if present]
    if not softmax and feature in WIDENING_FEATURES and per_key_channel:
        out.append(Conflict(
            f"feature map `{feature}` with {' and '.join(per_key_channel)}: those learn one value per "
            f"key channel (key_dim of them), but `{feature}` widens each key to 1 + d + d^2 channels, "
            "which the state's rows follow", ("relation", "feature"),
            "`feature = elu1` or `relu` (they keep the width), or `decay = data_dependent(scalar)` "
            "with `update = additive` or `delta`"))
    if isinstance(m.weights, nodes.NormalizedLinear) and feature not in NONNEGATIVE_FEATURES:
        source = f"feature `{feature}`" if isinstance(m.relation, nodes.Dot) else f"`{m.relation.kind}`"
        out.append(Conflict(
            f"`normalized_linear` weights with {source}: the scores can be negative, so their "
            "sum can be zero", ("weights",), "`relation = dot(feature=elu1)` (or relu, taylor)"))
    if not softmax and isinstance(m.relation, nodes.Positional):
        out.append(Conflict(
            "a positional-only relation with linear weights: a recurrence has no per-distance "
            "score table", ("relation",), "`weights = softmax`"))
    if not softmax and not isinstance(m.visibility, nodes.Full):
        out.append(Conflict(
            f"`visibility = {m.visibility.kind}(...)` with linear weights: the recurrent family "
            "folds the whole prefix into its state", ("visibility",),
            "`visibility = full` (decay is how a recurrence forgets), or softmax weights"))

    # --- learned values ------------------------------------------------------------------------
    if isinstance(m.weights, nodes.Softmax) and isinstance(m.weights.temperature, nodes.Learned) and (
            not isinstance(m.decay, nodes.NoDecay) or isinstance(m.position, nodes.Alibi)
            or isinstance(m.relation, nodes.Positional)):
        out.append(Conflict(
            "a learned temperature with a score bias (decay, alibi or a positional relation) is not "
            "supported yet: the paths divide the bias by a fixed temperature, not a per-head "
            "learned one", ("weights", "temperature"),
            "a fixed `temperature`, or `scale = learned(...)` in `relation = dot(...)`, which "
            "leaves the bias alone"))

    # --- what top-k selection can be combined with -------------------------------------------
    if chunked and not isinstance(m.visibility, nodes.Full):
        out.append(Conflict(
            f"chunk selection with `visibility = {m.visibility.kind}(...)`: chunk selection defines "
            "which keys are visible itself", ("visibility",), "`visibility = full`"))
    if top and not chunked and isinstance(m.visibility, nodes.ChunkLocal):
        out.append(Conflict(
            "element selection under `chunk_local` visibility is not supported", ("visibility",),
            "`visibility = full` or `window(n)`"))
    if chunked and isinstance(m.position, nodes.Alibi):
        out.append(Conflict(
            "chunk selection with ALiBi is not supported: chunk scores have no single distance",
            ("position",), "`position = rope` or `none`"))
    if top and not isinstance(m.decay, nodes.NoDecay):
        out.append(Conflict(
            "top-k selection with a decay is not supported", ("decay",), "`decay = none`"))
    if top and isinstance(m.relation, nodes.Positional):
        out.append(Conflict(
            "top-k selection over position-only scores picks the same key for every query",
            ("relation",), "`relation = dot`"))

    # --- shapes --------------------------------------------------------------------------------
    if m.qk_groups != "auto" and m.kv_groups != "auto":
        out.append(Conflict(
            "`qk_groups` and `kv_groups` both share the keys: a mixer shares either q and k "
            "(Mamba's ngroups) or k and v (grouped-query attention), not both", ("kv_groups",),
            "remove `qk_groups` (or `kv_groups`)"))
    key_dim = m.head_dim if m.key_dim == "auto" else m.key_dim
    if isinstance(m.position, nodes.Rope) and key_dim % 2:
        out.append(Conflict(
            f"rope rotates pairs of channels, but the query/key width is odd ({key_dim})",
            ("key_dim",) if m.key_dim != "auto" else ("head_dim",),
            "an even key_dim (or head_dim), or `position = none`"))
    return out
