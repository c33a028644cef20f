"""The lowering plan: what a mixer's module builds and runs, stage by stage, decided once.

    .seq text --> IR (`nodes.Mixer`) --> `MixerPlan` --> modules (`seqdsl.lower`) and backends

`mixer_plan(mixer, d_model)` reads the IR and the mixer's head layout once and returns four typed
stage records, in the order a forward runs them (docs/design.md §4):

    (1) `Inputs`     token shift or causal conv, and the q, k, v projections with their widths
    (2) `Relation`   where keys come from, qk-norm, position, the feature map and its input scaling
    (3) `Mixing`     the kernel key (`seqdsl.ir.key`), learned per-head factors on q, the decay's
                     parametrisation and the state update rule
    (4) `Output`     the normaliser division, the output norm and gate, the output projection

plus the initialisation recipe (`init`): which reference implementation's initial values the
mixing parameters take (docs/lowering.md, "Initialisation").

Every choice the lowering, the FLOP count and the initialisation share is made here, and only
here: which dense layers exist and how wide they are (`MixerPlan.linears`), the gate's rank, the
step size's rank. Each choice is a `match` over the IR's union or `Literal` with `assert_never`
in its last case, so a new primitive or slot value is a type error (and an AssertionError when
the first plan holding it is built: tests/ir/test_exhaustive.py builds one for every IR case),
never a silent fall-through to another value's meaning.

This module imports neither torch nor triton.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Literal

from typing_extensions import assert_never

from seqdsl.ir import nodes
from seqdsl.ir.key import KernelKey, kernel_key
from seqdsl.ir.layout import HeadLayout, head_layout
from seqdsl.ir.schedules import retnet_log_gammas

Recipe = Literal["mamba2", "gated_deltanet", "mamba1", "gla", "rwkv6", "rwkv7", "fixed", "none"]

# GLA's low-rank decay gate: `gate_low_rank_dim` (fla/layers/gla.py)
GATE_RANK = 16


def step_rank(d_model: int) -> int:
    """Width of the low-rank step-size projection of `data_dependent(selective)`: Mamba-1's
    `dt_rank = "auto"`, ceil(d_model / 16) (mamba_ssm/modules/mamba_simple.py)."""
    return math.ceil(d_model / 16)


def swiglu_hidden(mlp: nodes.SwiGLU, d_model: int) -> int:
    """`swiglu(auto)`: 8/3 d_model rounded up to a multiple of 64 (LLaMA's rule)."""
    if mlp.hidden != "auto":
        return mlp.hidden
    return 64 * -(-8 * d_model // (3 * 64))


@dataclass(frozen=True)
class Linear:
    """A dense layer of the mixer, named as in its module and checkpoints (`q_proj.weight`)."""

    name: str
    inputs: int
    outputs: int
    bias: bool = False

    @property
    def weights(self) -> int:
        return self.inputs * self.outputs


# --- (1) inputs ----------------------------------------------------------------------------------


@dataclass(frozen=True)
class Inputs:
    width: int  # d_model: what the projections read
    shift: bool  # RWKV's token shift: each projection reads its own mix of x_t and x_(t-1)
    conv: int | None  # the depthwise causal conv's width over the joined projections, or none
    q: Linear | None  # None: a positional relation has no queries
    k: Linear | None  # None: the keys do not come from the token (random, learned, none)
    v: Linear

    @property
    def projections(self) -> tuple[Linear, ...]:
        """The projections that exist, in the order their outputs are joined (and convolved)."""
        return tuple(p for p in (self.q, self.k, self.v) if p is not None)

    @property
    def channels(self) -> int:
        """Width of the joined projections: the conv's channels."""
        return sum(p.outputs for p in self.projections)


# --- (2) relation --------------------------------------------------------------------------------


@dataclass(frozen=True)
class KeyTable:
    """Frozen random keys, one per position (`random_keys(seed)`): the spec's seed, from which
    each layer's table is drawn."""

    seed: int


# projected: from the token (`dot`); learned: one learned key per head (`const_keys`);
# distances: no keys and no queries, the scores a learned per-head table of distances (`positional`)
KeySource = Literal["projected", "learned", "distances"] | KeyTable


@dataclass(frozen=True)
class Rotary:
    base: float


@dataclass(frozen=True)
class Relation:
    keys: KeySource
    qk_norm: bool
    position: Literal["none", "alibi"] | Rotary
    feature: nodes.FeatureMap
    # factors on q and k before a feature map other than identity (1.0: none). Based's taylor
    # features with `scale = auto` scale both by Dk^(-1/4), so that the expansion approximates
    # exp(q.k / sqrt(Dk)); a fixed scale multiplies q. With identity features the path applies
    # the scale to the scores (`KernelKey.scale`) and these are 1.
    feature_scales: tuple[float, float]


# --- (3) mixing ----------------------------------------------------------------------------------


@dataclass(frozen=True)
class LearnedFactors:
    """Per-head values the model learns (`learned(init)`), folded into q before the path (whose
    scale and temperature are then 1): their initial values, None where the value is fixed."""

    scale: float | None
    temperature: float | None


@dataclass(frozen=True)
class FixedDecay:
    """`constant(gamma)`: a per-head log decay, the same every step (RetNet's schedule for auto)."""

    log_gammas: tuple[float, ...]


@dataclass(frozen=True)
class ScalarDecay:
    """`data_dependent(scalar)`, Mamba-2's form: log a_t = -exp(A_log_h) softplus(W x_t + b)."""

    step: Linear  # d_model -> H, with the bias b


@dataclass(frozen=True)
class GateDecay:
    """`data_dependent(vector)`, GLA's low-rank gate: log a_t = logsigmoid(W_up W_down x_t + b) / 16,
    one value per key channel."""

    down: Linear
    up: Linear  # -> H * Dk, with the bias b


@dataclass(frozen=True)
class SelectiveDecay:
    """`data_dependent(selective)`, Mamba-1's step: dt_t = softplus(W_up W_down x_t + b) per head,
    log a_t[f] = -dt_t exp(rate_log[h, f]) per state row f, the write scaled by dt_t."""

    down: Linear
    up: Linear  # -> H, with the bias b
    rates: int  # F: state rows per head, each with its own rate


Decay = FixedDecay | ScalarDecay | GateDecay | SelectiveDecay | None


@dataclass(frozen=True)
class DeltaRule:
    beta: Linear  # d_model -> H, with a bias: beta_t = sigmoid(W x_t + b)


@dataclass(frozen=True)
class Rwkv7Rule:
    a: Linear  # d_model -> H * Dk, with a bias: RWKV-7's in-context rate a_t = sigmoid(W x_t + b)


# additive: S += k v^T; bonus: RWKV-6's learned per-channel bonus u on the current token's write
Update = Literal["additive", "bonus"] | DeltaRule | Rwkv7Rule


@dataclass(frozen=True)
class Mixing:
    key: KernelKey
    learned: LearnedFactors
    decay: Decay  # the softmax family adds it to the scores as a bias, the recurrent one decays its state
    update: Update  # the recurrent family's; "additive" for softmax (ir/conflicts.py refuses others)


# --- (4) output ----------------------------------------------------------------------------------


@dataclass(frozen=True)
class Gate:
    activation: Literal["swish", "sigmoid"]
    proj: Linear


@dataclass(frozen=True)
class Output:
    normalise: bool  # normalized_linear: divide by the normaliser carried as an extra value column
    norm: Literal["none", "groupnorm", "rmsnorm"]  # per head
    gate: Gate | None
    proj: Linear  # H * Dv -> d_model


# --- the plan ------------------------------------------------------------------------------------


@dataclass(frozen=True)
class MixerPlan:
    name: str
    layout: HeadLayout
    inputs: Inputs
    relation: Relation
    mixing: Mixing
    output: Output
    init: Recipe

    @property
    def stages(self) -> tuple[Inputs, Relation, Mixing, Output]:
        return (self.inputs, self.relation, self.mixing, self.output)

    @property
    def key(self) -> KernelKey:
        return self.mixing.key

    @property
    def linears(self) -> tuple[Linear, ...]:
        """Every dense layer of the mixer (what the FLOP count counts)."""
        gate = (self.output.gate.proj,) if self.output.gate is not None else ()
        return (self.inputs.projections + _decay_linears(self.mixing.decay)
                + _update_linears(self.mixing.update) + gate + (self.output.proj,))

    @property
    def per_position(self) -> bool:
        """True when the mixer has parameters per position (a random key table, a distance
        table), so it cannot run past the context they were sized for."""
        match self.relation.keys:
            case KeyTable() | "distances":
                return True
            case "projected" | "learned":
                return False
            case _:
                assert_never(self.relation.keys)


def _decay_linears(decay: Decay) -> tuple[Linear, ...]:
    match decay:
        case None | FixedDecay():
            return ()
        case ScalarDecay():
            return (decay.step,)
        case GateDecay() | SelectiveDecay():
            return (decay.down, decay.up)
        case _:
            assert_never(decay)


def _update_linears(update: Update) -> tuple[Linear, ...]:
    match update:
        case "additive" | "bonus":
            return ()
        case DeltaRule():
            return (update.beta,)
        case Rwkv7Rule():
            return (update.a,)
        case _:
            assert_never(update)


def mixer_plan(mixer: nodes.Mixer, d_model: int, layout: HeadLayout | None = None) -> MixerPlan:
    """The plan of `mixer` inside a model of width `d_model` (LayoutError if the heads do not fit:
    `seqdsl.ir.layout.head_layout`). The mixer is taken as conflict-free (`ir/conflicts.py`):
    the lowering refuses a conflicting one before planning it."""
    layout = layout or head_layout(mixer, d_model)
    key = kernel_key(mixer, d_model, layout)
    return MixerPlan(
        name=mixer.name, layout=layout,
        inputs=_inputs(mixer, d_model, layout),
        relation=_relation(mixer, layout),
        mixing=Mixing(key, _learned(mixer), _decay(mixer.decay, d_model, layout, key.feature_dim),
                      _update(mixer.update, d_model, layout)),
        output=_output(mixer, d_model, layout),
        init=_recipe(mixer.decay, mixer.update, layout.head_dim))


def _inputs(mixer: nodes.Mixer, d_model: int, lay: HeadLayout) -> Inputs:
    match mixer.conv:
        case nodes.NoConv():
            shift, conv = False, None
        case nodes.CausalConv(size=size):
            shift, conv = False, size
        case nodes.TokenShift():
            shift, conv = True, None
        case _:
            assert_never(mixer.conv)
    queries = Linear("q_proj", d_model, lay.qk_groups * lay.key_dim)
    keys = Linear("k_proj", d_model, lay.key_groups * lay.key_dim)
    q: Linear | None
    k: Linear | None
    match mixer.relation:
        case nodes.Dot():
            q, k = queries, keys
        case nodes.RandomKeys() | nodes.ConstKeys():
            q, k = queries, None
        case nodes.Positional():
            q, k = None, None
        case _:
            assert_never(mixer.relation)
    return Inputs(d_model, shift, conv, q, k, Linear("v_proj", d_model, lay.kv_groups * lay.head_dim))


def _relation(mixer: nodes.Mixer, lay: HeadLayout) -> Relation:
    rel = mixer.relation
    keys: KeySource
    match rel:
        case nodes.Dot():
            keys, feature, scales = "projected", rel.feature, _feature_scales(rel, lay.key_dim)
        case nodes.RandomKeys(seed=seed):
            keys, feature, scales = KeyTable(seed), "identity", (1.0, 1.0)
        case nodes.ConstKeys():
            keys, feature, scales = "learned", "identity", (1.0, 1.0)
        case nodes.Positional():
            keys, feature, scales = "distances", "identity", (1.0, 1.0)
        case _:
            assert_never(rel)
    position: Literal["none", "alibi"] | Rotary
    match mixer.position:
        case nodes.NoPosition():
            position = "none"
        case nodes.Rope(base=base):
            position = Rotary(base)
        case nodes.Alibi():
            position = "alibi"
        case _:
            assert_never(mixer.position)
    return Relation(keys, isinstance(rel, nodes.Dot) and rel.qk_norm, position, feature, scales)


def _feature_scales(rel: nodes.Dot, key_dim: int) -> tuple[float, float]:
    """The factors on (q, k) before the feature map (`Relation.feature_scales`)."""
    match rel.feature:
        case "identity":
            return 1.0, 1.0
        case "taylor" if rel.scale == "auto":
            return key_dim ** -0.25, key_dim ** -0.25
        case "elu1" | "relu" | "taylor":
            pass
        case _:
            assert_never(rel.feature)
    match rel.scale:
        case "auto" | nodes.Learned():  # a learned scale multiplies phi(q) . phi(k): `LearnedFactors`
            return 1.0, 1.0
        case float(scale):
            return scale, 1.0
        case _:
            assert_never(rel.scale)


def _learned(mixer: nodes.Mixer) -> LearnedFactors:
    rel, weights = mixer.relation, mixer.weights
    scale = rel.scale.init if isinstance(rel, nodes.Dot) and isinstance(rel.scale, nodes.Learned) else None
    temperature = None
    if isinstance(weights, nodes.Softmax) and isinstance(weights.temperature, nodes.Learned):
        temperature = weights.temperature.init
    return LearnedFactors(scale, temperature)


def _decay(decay: nodes.Decay, d_model: int, lay: HeadLayout, rows: int) -> Decay:
    match decay:
        case nodes.NoDecay():
            return None
        case nodes.ConstantDecay():
            return _fixed_decay(decay.gamma, lay.heads)
        case nodes.DataDependentDecay():
            return _data_dependent_decay(decay.granularity, d_model, lay, rows)
        case _:
            assert_never(decay)


def _fixed_decay(gamma: float | Literal["auto"], heads: int) -> FixedDecay:
    match gamma:
        case "auto":
            return FixedDecay(tuple(retnet_log_gammas(heads)))
        case float():
            return FixedDecay((math.log(gamma),) * heads)
        case _:
            assert_never(gamma)


def _data_dependent_decay(granularity: Literal["scalar", "vector", "selective"], d_model: int,
                          lay: HeadLayout, rows: int) -> ScalarDecay | GateDecay | SelectiveDecay:
    H = lay.heads
    match granularity:
        case "scalar":
            return ScalarDecay(Linear("dt_proj", d_model, H, bias=True))
        case "vector":
            return GateDecay(Linear("decay_down", d_model, GATE_RANK),
                             Linear("decay_up", GATE_RANK, H * lay.key_dim, bias=True))
        case "selective":
            rank = step_rank(d_model)
            return SelectiveDecay(Linear("dt_down", d_model, rank), Linear("dt_up", rank, H, bias=True), rows)
        case _:
            assert_never(granularity)


def _update(update: nodes.Update, d_model: int, lay: HeadLayout) -> Update:
    match update:
        case nodes.Additive():
            return "bonus" if update.bonus else "additive"
        case nodes.Delta():
            return DeltaRule(Linear("beta_proj", d_model, lay.heads, bias=True))
        case nodes.Rwkv7():
            return Rwkv7Rule(Linear("a_proj", d_model, lay.heads * lay.key_dim, bias=True))
        case _:
            assert_never(update)


def _output(mixer: nodes.Mixer, d_model: int, lay: HeadLayout) -> Output:
    width = lay.heads * lay.head_dim
    norm: Literal["none", "groupnorm", "rmsnorm"]
    match mixer.norm:
        case nodes.NoNorm() | nodes.GroupNorm() | nodes.RmsNorm():
            norm = mixer.norm.kind
        case _:
            assert_never(mixer.norm)
    gate = None
    match mixer.gate:
        case nodes.NoGate():
            pass
        case nodes.SwishGate() | nodes.SigmoidGate():
            gate = Gate(mixer.gate.kind, Linear("gate_proj", d_model, width))
        case _:
            assert_never(mixer.gate)
    return Output(isinstance(mixer.weights, nodes.NormalizedLinear), norm, gate,
                  Linear("o_proj", width, d_model))


def _recipe(decay: nodes.Decay, update: nodes.Update, head_dim: int) -> Recipe:
    """Which reference initialises the mixing parameters (docs/lowering.md, "Initialisation"),
    from the slots whose parametrisation is that reference's:

    - data_dependent(selective): Mamba-1 (the slot is Mamba-1's selective step);
    - data_dependent(scalar): Gated DeltaNet with the delta update, else Mamba-2 (the slot's
      form, -exp(A) softplus(W x + b), is theirs);
    - data_dependent(vector): RWKV-7 with update = rwkv7; RWKV-6 with the bonus (RWKV-6's u);
      Mamba-1 with one value per head (head_dim = 1: every channel its own d_state-row state, the
      selective SSM's layout); otherwise GLA (the slot's form is GLA's gate);
    - constant: fixed values (RetNet's schedule or the given gamma), nothing to draw; none: none."""
    match decay:
        case nodes.NoDecay():
            return "none"
        case nodes.ConstantDecay():
            return "fixed"
        case nodes.DataDependentDecay():
            return _data_dependent_recipe(decay.granularity, update, head_dim)
        case _:
            assert_never(decay)


def _data_dependent_recipe(granularity: Literal["scalar", "vector", "selective"], update: nodes.Update,
                           head_dim: int) -> Recipe:
    match granularity:
        case "selective":
            return "mamba1"
        case "scalar":
            return "gated_deltanet" if isinstance(update, nodes.Delta) else "mamba2"
        case "vector":
            pass
        case _:
            assert_never(granularity)
    match update:
        case nodes.Rwkv7():
            return "rwkv7"
        case nodes.Additive() if update.bonus:
            return "rwkv6"
        case nodes.Additive() | nodes.Delta():
            return "mamba1" if head_dim == 1 else "gla"
        case _:
            assert_never(update)
