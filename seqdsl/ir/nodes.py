"""The typed IR: frozen pydantic nodes, one class per primitive.

Every mixer in the paper is a composition of a few orthogonal choices (docs/design.md §4). Each choice
is a *slot* of `Mixer` (position, relation, visibility, weights, select, decay, update, conv, norm,
gate) whose type is a union of primitive classes. A primitive class:

- has a `kind` literal: the name the user writes in a spec (`window`, `softmax`, `top`, ...);
- lists its parameters as pydantic fields, in the order positional arguments bind to them;
- names in `POSITIONAL` the parameters the canonical printer writes positionally;
- carries its own documentation (the docstring), which `seqdsl explain` and the language
  reference quote.

The IR holds no source positions: equality is structural, so `parse(format(ir)) == ir`. Spans live
in a side table (`seqdsl.passes.sourcemap.SourceMap`) that the checker uses to point at the text.

This module imports neither torch nor triton.
"""

from __future__ import annotations

from typing import Annotated, ClassVar, Literal, TypedDict, Union, get_args

from pydantic import BaseModel, BeforeValidator, ConfigDict, Field


# Upper bound of every count and size in a spec (heads, widths, windows, contexts...): far above
# any real model, low enough that a typo like 10^20 heads is a located spec error, not an
# overflow deep inside torch.
MAX_SIZE = 2**24

# Lower bound of a softmax temperature and of a learned value's initial value. The scores are
# divided by the temperature in float32 or bfloat16 (largest finite value 3.4e38), and a learned
# value is used as exp(log value), so a temperature near 1e-38 turns the scores into inf and the
# weights into NaN; and from 1e-6 down a temperature only sharpens rounding noise: one float32
# rounding step of a unit score (1.2e-7) already weighs e^0.12 at T = 1e-6.
MIN_TEMPERATURE = 1e-6


def _at_least_min_temperature(what: str, why: str):
    """A pydantic before-validator: numbers below MIN_TEMPERATURE get a message that says why
    (the generic `greater than or equal to` would not)."""

    def check(value):
        if isinstance(value, (int, float)) and not isinstance(value, bool) and not value >= MIN_TEMPERATURE:
            raise ValueError(f"{what} must be at least {MIN_TEMPERATURE:g}, got {value:g}: {why}")
        return value

    return BeforeValidator(check)


_TEMPERATURE_AT_LEAST_MIN = _at_least_min_temperature(
    "the temperature", "the scores are divided by it in float32/bfloat16, which overflows to inf/NaN "
    "near 1e-38, and below 1e-06 it only sharpens rounding noise")
_LEARNED_AT_LEAST_MIN = _at_least_min_temperature(
    "a learned value", "a learned temperature divides the scores, which overflows float32/bfloat16 near "
    "1e-38 and below 1e-06 only sharpens rounding noise; a learned scale that small starts with no "
    "gradient (d exp(log s) = s)")


class Node(BaseModel):
    """Base of every IR node: immutable, no unknown fields, hashable."""

    model_config = ConfigDict(frozen=True, extra="forbid")


class Primitive(Node):
    """A primitive the user writes as `kind` or `kind(args...)`."""

    POSITIONAL: ClassVar[tuple[str, ...]] = ()
    kind: str


# --- learned values: a number the model trains, starting from `init` ----------------------------


class Learned(Primitive):
    """A value the model learns, one per head, starting at `init` (`softmax(temperature =
    learned(1.0))`, `dot(scale = learned(0.125))`). It is stored as a log, so it stays positive
    whatever the optimiser does; the checker judges the mixer from `init` and says the value is
    learned. `init` is at least 1e-6: a learned temperature divides the scores, and a learned
    scale that small would start with no gradient (d exp(log s) = s)."""

    POSITIONAL: ClassVar[tuple[str, ...]] = ("init",)
    kind: Literal["learned"] = "learned"
    init: Annotated[float, _LEARNED_AT_LEAST_MIN] = Field(1.0, ge=MIN_TEMPERATURE, le=MAX_SIZE)


def initial_value(value: "float | Learned") -> float:
    """A number, or the starting value of a learned one (what the checker judges)."""
    return value.init if isinstance(value, Learned) else float(value)


# --- position: how token order enters the scores -------------------------------------------------


class NoPosition(Primitive):
    """No positional signal in the mixer (order comes from causality, conv or decay alone)."""

    kind: Literal["none"] = "none"


class Rope(Primitive):
    """Rotary position embedding on queries and keys (Transformer++)."""

    kind: Literal["rope"] = "rope"
    base: float = Field(10000.0, gt=0)


class Alibi(Primitive):
    """ALiBi: a per-head linear distance penalty added to the scores (geometric slopes)."""

    kind: Literal["alibi"] = "alibi"


Position = Annotated[Union[NoPosition, Rope, Alibi], Field(discriminator="kind")]


# --- relation: how a query scores a key ----------------------------------------------------------

FeatureMap = Literal["identity", "elu1", "relu", "taylor"]


class Dot(Primitive):
    """Content-based relation: score(i, j) = phi(q_i) . phi(k_j) * scale.

    `scale = auto` means 1/sqrt(head_dim); `scale = learned(init)` is a per-head scale the model
    learns (it multiplies the scores, after the feature map). `feature` is the feature map phi
    applied to q and k (identity for attention; elu1 for linear attention; taylor for Based's
    2nd-order Taylor expansion of exp). `qk_norm` RMS-normalises q and k per head before the
    product."""

    kind: Literal["dot"] = "dot"
    scale: Union[float, Literal["auto"], Learned] = "auto"
    feature: FeatureMap = "identity"
    qk_norm: bool = False


class RandomKeys(Primitive):
    """Keys replaced by frozen random vectors, one per position, drawn once from N(0, 1/head_dim)
    with `seed`: the score still depends on the query's content but not on the key token's."""

    kind: Literal["random_keys"] = "random_keys"
    seed: int = Field(0, ge=0, le=2**32 - 1)


class ConstKeys(Primitive):
    """Every key is the same learned vector: all keys score alike, whatever the tokens."""

    kind: Literal["const_keys"] = "const_keys"


class Positional(Primitive):
    """Scores depend on positions only (a learned per-head function of distance), not on content."""

    kind: Literal["positional"] = "positional"


Relation = Annotated[Union[Dot, RandomKeys, ConstKeys, Positional], Field(discriminator="kind")]


# --- visibility: which earlier tokens one mixing step can reach ----------------------------------


class Full(Primitive):
    """Every earlier token (and the token itself) is visible: causal, unbounded."""

    kind: Literal["full"] = "full"


class Window(Primitive):
    """Sliding window: token i sees tokens j with i - size < j <= i, and with `sink = n` also the
    first n tokens of the sequence, j < n (StreamingLLM's attention sinks: `window(256, sink=4)`)."""

    POSITIONAL: ClassVar[tuple[str, ...]] = ("size",)
    kind: Literal["window"] = "window"
    size: int = Field(gt=0, le=MAX_SIZE)
    sink: int = Field(0, ge=0, le=MAX_SIZE)


class ChunkLocal(Primitive):
    """Token i sees only earlier tokens of its own chunk of `size` tokens."""

    POSITIONAL: ClassVar[tuple[str, ...]] = ("size",)
    kind: Literal["chunk_local"] = "chunk_local"
    size: int = Field(gt=0, le=MAX_SIZE)


Visibility = Annotated[Union[Full, Window, ChunkLocal], Field(discriminator="kind")]


# --- weights: how scores become mixing weights ---------------------------------------------------


class Softmax(Primitive):
    """w_ij = softmax_j(score_ij / temperature): sharpens; lower temperature concentrates more.
    `temperature = learned(init)` is a per-head temperature the model learns. The temperature
    (or its initial value) is at least 1e-6: the scores are divided by it in float32/bfloat16."""

    kind: Literal["softmax"] = "softmax"
    temperature: Union[Annotated[float, _TEMPERATURE_AT_LEAST_MIN, Field(ge=MIN_TEMPERATURE)], Learned] = 1.0


class Linear(Primitive):
    """w_ij = score_ij, unnormalised (linear attention / SSM / RNN family)."""

    kind: Literal["linear"] = "linear"


class NormalizedLinear(Primitive):
    """w_ij = score_ij / sum_j score_ij (requires non-negative feature maps)."""

    kind: Literal["normalized_linear"] = "normalized_linear"


Weights = Annotated[Union[Softmax, Linear, NormalizedLinear], Field(discriminator="kind")]


# --- select: top-k selection before mixing -------------------------------------------------------


class NoSelect(Primitive):
    """No selection: every visible key takes part in the weighted sum."""

    kind: Literal["none"] = "none"


class Element(Primitive):
    """Select among single keys."""

    kind: Literal["element"] = "element"


class Chunk(Primitive):
    """Select among contiguous chunks of `size` keys."""

    POSITIONAL: ClassVar[tuple[str, ...]] = ("size",)
    kind: Literal["chunk"] = "chunk"
    size: int = Field(gt=0, le=MAX_SIZE)


Over = Annotated[Union[Element, Chunk], Field(discriminator="kind")]


class Top(Primitive):
    """Top-k selection. Each query keeps the k best keys (over=element) or the k best chunks
    (over=chunk(n)) among the visible ones, then mixes only those.

    - `score` (chunks only): how a chunk is scored for query q. `max` = the best single key in
      the chunk (Exact); `mean` = q . mean(k in chunk) (Approx, cheaper); `lse` = log-sum-exp of
      the chunk's scores.
    - `local` (chunks only): also attend the query's own chunk besides the selected ones (as MoBA
      does). The selected chunks are chosen among the *earlier, complete* chunks.
    - `grad`: `ste` = straight-through estimator (forward: hard selection; backward: through the
      softmax surrogate over the same candidates); `none` = no gradient through the choice.
    - `value_grad` (element selection with grad=ste): `hard` = dL/dv flows only to the selected
      value (the exact derivative of the hard forward); `soft` = dL/dv_j = p_j dL/do, as if the
      softmax surrogate had produced the output.
    - `sink` (chunks only): every query also attends the first `sink` tokens of the sequence
      (causally), besides its chosen chunks and its own (InfLLM's initial tokens, StreamingLLM's
      sinks, under block selection). The selection is unchanged: the chunk holding the sinks
      stays a candidate, and a key both sunk and selected is attended once. Element selection
      writes its sinks in the window: `window(w, sink=n)`.
    - `share` (chunks only): `head` = each query head chooses its own chunks; `group` = the query
      heads that share one key/value head (`kv_groups`) choose together, as NSA's selected branch
      does (Yuan et al. 2025, eq. 10): each head's chunk scores become a softmax over its
      candidates (at the temperature), the group sums them, and every head of the group attends
      the group's k best chunks (its own scores still weigh the keys inside them).
    """

    POSITIONAL: ClassVar[tuple[str, ...]] = ("k",)
    kind: Literal["top"] = "top"
    k: int = Field(1, gt=0, le=MAX_SIZE)
    over: Over = Element()
    score: Literal["max", "mean", "lse"] = "max"
    local: bool = True
    grad: Literal["ste", "none"] = "ste"
    value_grad: Literal["hard", "soft"] = "hard"
    sink: int = Field(0, ge=0, le=MAX_SIZE)
    share: Literal["head", "group"] = "head"


Select = Annotated[Union[NoSelect, Top], Field(discriminator="kind")]


# --- decay: how the past is forgotten ------------------------------------------------------------


class NoDecay(Primitive):
    """Nothing is forgotten."""

    kind: Literal["none"] = "none"


class ConstantDecay(Primitive):
    """A fixed per-head decay gamma in (0, 1): contributions shrink as gamma^(i-j).
    `gamma = auto` uses RetNet's schedule gamma_h = 1 - 2^(-5-h) for head h."""

    kind: Literal["constant"] = "constant"
    # Strictly inside (0, 1): gamma = 1 would be no decay, gamma <= 0 or > 1 is not a decay.
    gamma: Union[Annotated[float, Field(gt=0, lt=1)], Literal["auto"]] = "auto"


class DataDependentDecay(Primitive):
    """An input-dependent decay alpha_t in (0, 1): one scalar per head (Mamba-2, simple GLA,
    Gated DeltaNet), one free value per key channel (GLA, RWKV-6/7), or Mamba-1's selective
    step: alpha_t[k] = exp(-dt_t exp(A_log[k])), one step size dt_t = softplus(W x_t + b) per head
    and step times a fixed rate per key channel (state entry), the step also scaling the write
    (S_t = alpha_t * S_(t-1) + dt_t k_t v_t^T: Mamba's discretised input dt B x)."""

    POSITIONAL: ClassVar[tuple[str, ...]] = ("granularity",)
    kind: Literal["data_dependent"] = "data_dependent"
    granularity: Literal["scalar", "vector", "selective"] = "scalar"


Decay = Annotated[Union[NoDecay, ConstantDecay, DataDependentDecay], Field(discriminator="kind")]


# --- update: state update rule of the recurrent (linear-weights) family --------------------------


class Additive(Primitive):
    """S_t = decay_t * S_(t-1) + k_t v_t^T; o_t = q_t^T S_t. With `bonus`, RWKV-6's reading:
    o_t = q_t^T (S_(t-1) + diag(u) k_t v_t^T), u a learned per-channel bonus."""

    kind: Literal["additive"] = "additive"
    bonus: bool = False


class Delta(Primitive):
    """Delta rule: S_t = decay_t * S_(t-1) (I - beta_t k_t k_t^T) + beta_t k_t v_t^T (DeltaNet;
    with a data-dependent scalar decay this is Gated DeltaNet)."""

    kind: Literal["delta"] = "delta"


class Rwkv7(Primitive):
    """RWKV-7's generalised delta rule: S_t = S_(t-1) (diag(w_t) - kappa_t (a_t * kappa_t)^T)
    + k_t v_t^T, with in-context learning rate a_t and removal key kappa_t."""

    kind: Literal["rwkv7"] = "rwkv7"


Update = Annotated[Union[Additive, Delta, Rwkv7], Field(discriminator="kind")]


# --- conv, norm, gate ----------------------------------------------------------------------------


class NoConv(Primitive):
    """No short convolution."""

    kind: Literal["none"] = "none"


class CausalConv(Primitive):
    """Depthwise causal convolution of width `size` on q, k and v (Mamba, Based, GDN)."""

    POSITIONAL: ClassVar[tuple[str, ...]] = ("size",)
    kind: Literal["causal"] = "causal"
    size: int = Field(4, gt=0, le=MAX_SIZE)


class TokenShift(Primitive):
    """RWKV token shift: inputs are a learned per-channel mix of x_t and x_(t-1)."""

    kind: Literal["token_shift"] = "token_shift"


Conv = Annotated[Union[NoConv, CausalConv, TokenShift], Field(discriminator="kind")]


class NoNorm(Primitive):
    """No normalisation of the mixer output."""

    kind: Literal["none"] = "none"


class GroupNorm(Primitive):
    """Per-head normalisation of the output (RetNet, RWKV, Mamba-2's grouped RMSNorm)."""

    kind: Literal["groupnorm"] = "groupnorm"


class RmsNorm(Primitive):
    """Per-head RMSNorm of the output (GLA, Gated DeltaNet)."""

    kind: Literal["rmsnorm"] = "rmsnorm"


Norm = Annotated[Union[NoNorm, GroupNorm, RmsNorm], Field(discriminator="kind")]


class NoGate(Primitive):
    """No output gate."""

    kind: Literal["none"] = "none"


class SwishGate(Primitive):
    """o <- o * silu(W_g x) (Mamba, GLA, RetNet)."""

    kind: Literal["swish"] = "swish"


class SigmoidGate(Primitive):
    """o <- o * sigmoid(W_g x) (RWKV)."""

    kind: Literal["sigmoid"] = "sigmoid"


Gate = Annotated[Union[NoGate, SwishGate, SigmoidGate], Field(discriminator="kind")]


# --- the mixer -----------------------------------------------------------------------------------

Auto = Literal["auto"]


class Mixer(Node):
    """A fully resolved sequence mixer: every slot holds a primitive (defaults filled in).

    `heads = auto` takes expand * d_model // head_dim from the model (`expand` widens the mixer's
    inner dimension, 2 in Mamba); `key_dim = auto` takes head_dim
    (state rows of the recurrent family: Mamba's d_state, GLA's key dimension).
    `qk_groups` is how many distinct query/key projections the heads share (Mamba's `ngroups`:
    1 = one B and one C for every head); `auto` gives every head its own.
    `kv_groups` is how many distinct key/value projections the heads share (grouped-query
    attention; 1 = multi-query attention); `auto` gives every head its own. A mixer shares
    either q and k (`qk_groups`) or k and v (`kv_groups`), not both."""

    name: str
    heads: Union[Annotated[int, Field(gt=0, le=MAX_SIZE)], Auto] = "auto"
    head_dim: int = Field(64, gt=0, le=MAX_SIZE)
    expand: int = Field(1, gt=0, le=MAX_SIZE)
    key_dim: Union[Annotated[int, Field(gt=0, le=MAX_SIZE)], Auto] = "auto"
    qk_groups: Union[Annotated[int, Field(gt=0, le=MAX_SIZE)], Auto] = "auto"
    kv_groups: Union[Annotated[int, Field(gt=0, le=MAX_SIZE)], Auto] = "auto"
    position: Position = NoPosition()
    relation: Relation = Dot()
    visibility: Visibility = Full()
    weights: Weights = Softmax()
    select: Select = NoSelect()
    decay: Decay = NoDecay()
    update: Update = Additive()
    conv: Conv = NoConv()
    norm: Norm = NoNorm()
    gate: Gate = NoGate()

    @property
    def is_recurrent(self) -> bool:
        """True for the linear-weights family, which runs with a fixed-size recurrent state."""
        return not isinstance(self.weights, Softmax)


# Slots a `mixer` block may assign, in canonical print order.
MIXER_SLOTS: tuple[str, ...] = tuple(f for f in Mixer.model_fields if f != "name")


# --- the model -----------------------------------------------------------------------------------


class SwiGLU(Primitive):
    """SwiGLU MLP with `hidden` units (auto = 8/3 d_model rounded up to a multiple of 64)."""

    POSITIONAL: ClassVar[tuple[str, ...]] = ("hidden",)
    kind: Literal["swiglu"] = "swiglu"
    hidden: Union[Annotated[int, Field(gt=0, le=MAX_SIZE)], Auto] = "auto"


class NoMlp(Primitive):
    """No MLP: blocks are mixer-only (as in Mamba's homogeneous stacks)."""

    kind: Literal["none"] = "none"


Mlp = Annotated[Union[SwiGLU, NoMlp], Field(discriminator="kind")]

Block = Literal["transformer", "rwkv7"]
# The model sizes a spec's `preset = ...` fills and a run's or `seqdsl lower`'s preset resizes to:
# one set of names, typed once (the run config and the command line take their choices from here).
Preset = Literal["tiny", "110m", "1.3b"]
PRESETS: tuple[Preset, ...] = get_args(Preset)


class Model(Node):
    """A causal LM around one or more mixers.

    `mixer` lists mixer names; layer l uses mixer[l % len(mixer)] (one name = homogeneous model,
    several = a hybrid). `block = transformer` is a pre-norm block (RMSNorm, mixer, RMSNorm,
    SwiGLU); `block = rwkv7` is RWKV-7's block layout (token-shifted channel mix), used to
    transplant mixers into RWKV-7 as in the paper. `context` is the training context length,
    which the checker compares windows and decay horizons against."""

    name: str
    layers: int = Field(gt=0, le=MAX_SIZE)
    d_model: int = Field(gt=0, le=MAX_SIZE)
    mlp: Mlp = SwiGLU()
    vocab: int = Field(gt=0, le=MAX_SIZE)
    tie: bool = True
    mixer: tuple[str, ...] = Field(min_length=1)
    block: Block = "transformer"
    context: int = Field(2048, gt=0, le=MAX_SIZE)


# Sizes of the presets a model may start from (`preset = "110m"`); explicit fields override.
class PresetSizes(TypedDict):
    """The model sizes a preset sets."""

    layers: int
    d_model: int
    vocab: int
    context: int


PRESET_SIZES: dict[str, PresetSizes] = {
    "tiny": {"layers": 2, "d_model": 128, "vocab": 256, "context": 256},
    "110m": {"layers": 12, "d_model": 768, "vocab": 50277, "context": 2048},
    "1.3b": {"layers": 24, "d_model": 2048, "vocab": 50277, "context": 2048},
}

MODEL_SLOTS: tuple[str, ...] = tuple(f for f in Model.model_fields if f != "name")


# --- the syntax-level module: what a file says, before inheritance is applied --------------------

Value = object  # a typed slot value: a Primitive, int, float, bool, str or tuple of str


class Assign(Node):
    """`key = value` inside a block, already typed against the slot it assigns."""

    key: str
    value: Value


class MixerDecl(Node):
    """`mixer NAME [extends BASE] { assigns }`: a mixer as written."""

    name: str
    extends: str | None = None
    assigns: tuple[Assign, ...] = ()


class ModelDecl(Node):
    """`model NAME [extends BASE] { assigns }`: a model as written. `preset` is an assign."""

    name: str
    extends: str | None = None
    assigns: tuple[Assign, ...] = ()


class Module(Node):
    """One .seq file: its imports (paths as written) and declarations in order."""

    imports: tuple[str, ...] = ()
    decls: tuple[Union[MixerDecl, ModelDecl], ...] = ()


class Program(Node):
    """Everything a file defines after imports and inheritance are resolved.

    `mixers`/`models` include imported ones; `own` lists names this file itself declares."""

    mixers: tuple[Mixer, ...] = ()
    models: tuple[Model, ...] = ()
    own: tuple[str, ...] = ()

    def mixer(self, name: str) -> Mixer:
        for m in self.mixers:
            if m.name == name:
                return m
        raise KeyError(name)

    def model(self, name: str) -> Model:
        for m in self.models:
            if m.name == name:
                return m
        raise KeyError(name)
