"""The kernel key: everything a mixer's stage-(3) computation is specialised on, computed once.

A `KernelKey` is a frozen, hashable record derived from the IR (`kernel_key(mixer, d_model)`),
in plain Python. It is the one statement of what a mixer *means* to a backend: the planner picks a
path from it, the fla mapping and the self-check cache key on it, codegen renders Triton source
from it, and custom-op names are derived from it. Nothing downstream reads the spec back from
tensors (which fields are None, how many dims a decay has) or from the module that owns a path.

The key holds what changes the *computation*, not the parameters: two mixers with the same key run
the same kernels on tensors of the same shapes.

Shape names as elsewhere: H heads, Dk key width (state rows), Dv value width, G query/key groups,
K key/value groups (grouped-query attention), F feature width of phi(k).

This module imports neither torch nor triton.
"""

from __future__ import annotations

import functools
import hashlib
import math
from dataclasses import dataclass, replace
from typing import Literal

from typing_extensions import assert_never

from seqdsl.ir import nodes
from seqdsl.ir.layout import HeadLayout, head_layout

Family = Literal["softmax", "select", "recurrent"]
RelationKind = Literal["dot", "random_keys", "const_keys", "positional"]
PositionKind = Literal["none", "rope", "alibi"]
VisibilityKind = Literal["full", "window", "chunk_local"]
WeightsKind = Literal["softmax", "linear", "normalized_linear"]
DecayKind = Literal["none", "constant", "scalar", "vector", "selective"]
UpdateKind = Literal["additive", "bonus", "delta", "rwkv7"]


def feature_width(feature: nodes.FeatureMap, d: int) -> int:
    """Width F of phi(x) for an input of width d (`seqdsl.reference.features` computes phi)."""
    match feature:
        case "identity" | "elu1" | "relu":
            return d
        case "taylor":
            return 1 + d + d * d
        case _:
            assert_never(feature)


@dataclass(frozen=True)
class SelectKey:
    """Top-k selection, as the kernels see it (see seqdsl/reference/top1.py for the semantics)."""

    k: int
    over: Literal["element", "chunk"]
    chunk: int | None  # chunk size for over=chunk, else None
    score: Literal["max", "mean", "lse"]  # chunk score (element: always "max")
    local: bool  # chunk selection also attends the query's own chunk
    grad: Literal["ste", "none"]
    value_grad: Literal["hard", "soft"]  # element selection with grad=ste
    sink: int = 0  # chunk selection: the first `sink` tokens attended besides the chosen chunks
    share: Literal["head", "group"] = "head"  # chunk selection: chosen per query head, or per kv group


@dataclass(frozen=True)
class KernelKey:
    family: Family  # softmax attention, top-k selection, or the recurrent (linear-weights) family
    heads: int  # H
    key_dim: int  # Dk (before the feature map)
    head_dim: int  # Dv
    qk_groups: int  # G
    kv_groups: int  # K: heads share k and v in groups of H / K (H = no sharing); the cache holds K heads
    feature: nodes.FeatureMap  # phi
    feature_dim: int  # F = width of phi(k)
    relation: RelationKind
    qk_norm: bool
    position: PositionKind
    # The factor applied to q.k by the path (1/sqrt(Dk) for `scale = auto`; 1 when the feature
    # map took the scale into q, as for Based's Taylor features).
    scale: float
    temperature: float  # softmax temperature (1.0 for the recurrent family)
    # softmax family
    visibility: VisibilityKind
    window: int | None  # window size, or chunk_local size, else None
    score_bias: bool  # an additive (H or B,H, L, L) bias: decay or positional relation (not ALiBi)
    select: SelectKey | None
    # recurrent family
    weights: WeightsKind
    # constant, data-dependent scalar, per-channel vector, Mamba-1's selective step (per-head
    # step size x per-channel rate, the write scaled by the step); ALiBi adds a constant
    decay: DecayKind
    update: UpdateKind
    value_cols: int  # columns of v the state carries: Dv, + 1 normaliser for normalized_linear
    # Learned values (`learned(init)`): a per-head parameter (exp of an nn.Parameter) that the
    # lowering folds into q before stage (3) (seqdsl/lower/stages.py: LearnedFactor), so `scale`
    # and `temperature` above are then 1: a kernel computes the same with or without these flags. They say
    # that q carries a trainable per-head factor (for naming, and for a kernel that might one
    # day take the factor as an input instead).
    learned_scale: bool
    learned_temperature: bool
    # softmax family: the first `sink` tokens stay visible besides the window (`window(w, sink=n)`)
    sink: int = 0

    @property
    def decay_shape(self) -> Literal["none", "scalar", "vector", "selective"]:
        """The shape of the log decay the recurrent path receives: none, (B,T,H) or (B,T,H,Dk);
        "selective": a step size (B,T,H) and a rate (H,Dk) instead (RecurrentInputs.step, .rate),
        which `seqdsl.reference.recurrent.selective_to_additive` turns into a (B,T,H,Dk) log decay
        and step-scaled values. A constant decay and ALiBi's per-head penalty arrive as per-head
        scalars."""
        if self.decay in ("vector", "selective"):
            return self.decay
        if self.decay == "none" and self.position != "alibi":
            return "none"
        return "scalar"

    def slug(self) -> str:
        """A short, stable, identifier-safe name: custom-op names and cache file names use it.
        Kernel launches ask for it, so it is computed once per key."""
        return _slug(self)


def selection(key: KernelKey) -> SelectKey:
    """`key.select`, for code that knows the family is "select" (ValueError if it has none)."""
    if key.select is None:
        raise ValueError(f"a kernel key of family {key.family!r} has no top-k selection")
    return key.select


def sliding_window(key: KernelKey) -> int | None:
    """The sliding window's size when the visibility is `window(w)` (its sink tokens are
    `key.sink`), else None: chunk-local visibility also keeps a size in `key.window`."""
    return key.window if key.visibility == "window" else None


def selection_group(key: KernelKey) -> int:
    """How many query heads choose their chunks together: H / K under `share = group` (the heads
    of one key/value head), else 1 (each head alone)."""
    sel = selection(key)
    return key.heads // key.kv_groups if sel.share == "group" else 1


def shared_kv_group(key: KernelKey) -> int:
    """How many query heads share each key/value head in the tensors a kernel is handed: H / K
    when the keys are projected in the values' K groups (grouped-query attention: k and v both
    hold K heads, read in place), else 1 (k or v holds one head per query head, or gets repeated
    to one: keys from a table or a constant are per head; keys grouped with the queries, G < K,
    leave the values per head)."""
    if key.kv_groups < key.heads and key.relation == "dot" and key.qk_groups >= key.kv_groups:
        return key.heads // key.kv_groups
    return 1


def window_size(key: KernelKey) -> int:
    """`key.window`, for code that knows the visibility is window or chunk_local (ValueError if
    it has none)."""
    if key.window is None:
        raise ValueError(f"a kernel key of visibility {key.visibility!r} has no window size")
    return key.window


def chunk_size(select: SelectKey) -> int:
    """`select.chunk`, for code that knows the selection is over chunks (ValueError if it has none)."""
    if select.chunk is None:
        raise ValueError(f"a top-k selection over {select.over!r} has no chunk size")
    return select.chunk


def runs_topk_kernels(select: SelectKey) -> bool:
    """Whether the generated top-k kernels run `select` rather than the Top-1 ones: k > 1, or what
    only the top-k chunk kernels compute, for k = 1 too: lse chunk scores, sink tokens, chunks
    chosen per key/value group."""
    return select.k > 1 or (select.over == "chunk" and (select.score == "lse" or select.sink > 0
                                                        or select.share == "group"))


@functools.lru_cache(maxsize=None)
def _slug(key: KernelKey) -> str:
    digest = hashlib.sha256(repr(key).encode()).hexdigest()[:12]
    what = f"top{key.select.k}_{key.select.over}" if key.select is not None else key.family
    return f"{what}_{digest}"


def _score_scale(mixer: nodes.Mixer, feature: str, key_dim: int) -> float:
    rel = mixer.relation
    if feature != "identity":
        return 1.0  # the feature map's input carries the scale (`seqdsl.ir.plan.Relation.feature_scales`)
    if isinstance(rel, nodes.Dot):
        if isinstance(rel.scale, nodes.Learned):
            return 1.0  # folded into q, per head
        if rel.scale != "auto":
            return float(rel.scale)
    return 1.0 / math.sqrt(key_dim)


def _fixed_temperature(weights: nodes.Weights) -> float:
    """The temperature the path divides by: the softmax's, 1 for the recurrent family and for a
    learned temperature (folded into q, per head)."""
    if isinstance(weights, nodes.Softmax) and not isinstance(weights.temperature, nodes.Learned):
        return weights.temperature
    return 1.0


def _decay_kind(decay: nodes.Decay) -> DecayKind:
    match decay:
        case nodes.NoDecay():
            return "none"
        case nodes.ConstantDecay():
            return "constant"
        case nodes.DataDependentDecay():
            return decay.granularity
        case _:
            assert_never(decay)


def _update_kind(update: nodes.Update) -> UpdateKind:
    match update:
        case nodes.Additive():
            return "bonus" if update.bonus else "additive"
        case nodes.Delta():
            return "delta"
        case nodes.Rwkv7():
            return "rwkv7"
        case _:
            assert_never(update)


def _select_key(select: nodes.Select) -> SelectKey | None:
    match select:
        case nodes.NoSelect():
            return None
        case nodes.Top():
            return _top_key(select)
        case _:
            assert_never(select)


def _top_key(top: nodes.Top) -> SelectKey:
    over = top.over
    match over:
        case nodes.Element():  # the score, local, sink, share: chunks only
            return SelectKey(k=top.k, over="element", chunk=None, score="max", local=False, grad=top.grad,
                             value_grad=top.value_grad)
        case nodes.Chunk():
            return SelectKey(k=top.k, over="chunk", chunk=over.size, score=top.score, local=top.local,
                             grad=top.grad, value_grad=top.value_grad, sink=top.sink, share=top.share)
        case _:
            assert_never(over)


def _feature(relation: nodes.Relation) -> nodes.FeatureMap:
    match relation:
        case nodes.Dot():
            return relation.feature
        case nodes.RandomKeys() | nodes.ConstKeys() | nodes.Positional():
            return "identity"
        case _:
            assert_never(relation)


def _sink(visibility: nodes.Visibility) -> int:
    match visibility:
        case nodes.Window():
            return visibility.sink
        case nodes.Full() | nodes.ChunkLocal():
            return 0
        case _:
            assert_never(visibility)


def _window(visibility: nodes.Visibility) -> int | None:
    match visibility:
        case nodes.Full():
            return None
        case nodes.Window() | nodes.ChunkLocal():
            return visibility.size
        case _:
            assert_never(visibility)


def kernel_key(mixer: nodes.Mixer, d_model: int, layout: HeadLayout | None = None) -> KernelKey:
    """The key of `mixer` inside a model of width `d_model` (raises LayoutError if the heads do
    not fit: `seqdsl.ir.layout.head_layout`)."""
    layout = layout or head_layout(mixer, d_model)
    rel = mixer.relation
    feature = _feature(rel)
    softmax = isinstance(mixer.weights, nodes.Softmax)
    select = _select_key(mixer.select)
    vis = mixer.visibility
    decay = _decay_kind(mixer.decay)
    return KernelKey(
        family="select" if select is not None else "softmax" if softmax else "recurrent",
        heads=layout.heads, key_dim=layout.key_dim, head_dim=layout.head_dim,
        qk_groups=layout.qk_groups, kv_groups=layout.kv_groups, feature=feature,
        feature_dim=feature_width(feature, layout.key_dim), relation=rel.kind,
        qk_norm=isinstance(rel, nodes.Dot) and rel.qk_norm, position=mixer.position.kind,
        scale=_score_scale(mixer, feature, layout.key_dim),
        temperature=_fixed_temperature(mixer.weights),
        visibility=vis.kind, window=_window(vis),
        score_bias=softmax and (decay != "none" or isinstance(rel, nodes.Positional)),
        select=select, weights=mixer.weights.kind, decay=decay,
        update=_update_kind(mixer.update),
        value_cols=layout.head_dim + isinstance(mixer.weights, nodes.NormalizedLinear),
        learned_scale=isinstance(rel, nodes.Dot) and isinstance(rel.scale, nodes.Learned),
        learned_temperature=(isinstance(mixer.weights, nodes.Softmax)
                             and isinstance(mixer.weights.temperature, nodes.Learned)),
        sink=_sink(vis),
    )


# --- dense attention in disguise -------------------------------------------------------------------


@dataclass(frozen=True)
class Dense:
    """A softmax or selection mixer whose restriction covers the whole context, so that on any
    sequence of at most `upto` tokens (`upto` >= the context) it computes plain causal softmax
    attention: a window or chunk-local span of at least the context, top-k keeping every key,
    chunk selection attending every chunk. `key` is the mixer's key as that attention (full
    visibility, no selection); `reason` says why, in words a plan or a finding can quote."""

    key: KernelKey
    upto: int
    reason: str


def dense_at(key: KernelKey, context: int) -> Dense | None:
    """The `Dense` fact of `key` at a `context`-token context, or None when some restriction of
    the mixer bites within the context (or it has none: it is already plain attention, or
    recurrent). Exact, gradients included: top-k keeping every visible key has w_sel = p, so
    its straight-through output and gradients are softmax attention's; chunk selection with
    every candidate chosen attends every visible key and its STE factor's G is constant 1 (or
    0 without candidates)."""
    if key.family == "recurrent":
        return None
    limits: list[tuple[int, str]] = []  # (longest sequence it holds for, why)
    if key.visibility in ("window", "chunk_local"):
        window = window_size(key)
        limits.append((window, f"{key.visibility}({window}) covers the {context}-token context"))
    sel = key.select
    if sel is not None and sel.over == "element":
        limits.append((sel.k, f"top({sel.k}) keeps every key of the {context}-token context"))
    elif sel is not None:
        # query i has i // c earlier chunks (+ its own without `local`) as candidates: all are
        # chosen while that count is at most k
        chunk = chunk_size(sel)
        reach = (sel.k + sel.local) * chunk
        why = (f"chunk({chunk}) covers the {context}-token context" if chunk >= context else
               f"top({sel.k}, over=chunk({chunk})) selects every chunk of the {context}-token context")
        limits.append((reach, why))
    if not limits or any(reach < context for reach, _ in limits):
        return None
    plain = replace(key, family="softmax", visibility="full", window=None, select=None, sink=0)
    return Dense(plain, min(reach for reach, _ in limits), "; ".join(why for _, why in limits))
