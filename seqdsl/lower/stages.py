"""The four stages of a lowered mixer, each made from its record of the `MixerPlan`.

Shape legend
    B batch   T new tokens   L tokens so far (cache + new)   D d_model
    H heads   Dk key dim (state rows)   Dv head dim (value width)   F feature dim of phi
    G query/key groups (qk_groups)   Gk key groups   K key/value groups (kv_groups)

    (1) InputStage      token shift / causal conv, projections to q, k, v per head
    (2) RelationStage   keys from content, a frozen random table, one learned key, or none
                        (positional); qk-norm, rope, feature map
    (3) AttentionMixing softmax family: attention / top-k selection over cached keys, with the
        RecurrentMixing score biases; recurrent family: state recurrence with decay and update
                        rule. The arithmetic is a *path*'s (seqdsl.lower.paths): the reference
                        oracle or a fast kernel, chosen per device and reported.
    (4) OutputStage     normaliser, per-head norm, output gate, output projection

A stage is made once from its plan record. Making it registers the parameters the record asks for
on the mixer module (`owner`), under the flat names its checkpoints use (`q_proj.weight`,
`A_log`); running it reads them back from that module by name. The module holds them, not the
stage: `.to()`, `load_state_dict(assign=True)` and distributed wrappers replace tensors on the
module, and a stage's own references would go stale. Every choice between variants (where keys
come from, which decay parametrisation, which update rule, which gate) is the plan's, read here
with `match` and `assert_never`: a plan value no stage knows is a type error, not a silent skip.
"""

from __future__ import annotations

import hashlib
import math
from dataclasses import dataclass
from typing import Literal

import torch
import torch.nn.functional as F
from torch import Tensor, nn
from typing_extensions import assert_never

from seqdsl.ir import nodes
from seqdsl.ir import plan as ir
from seqdsl.ir.layout import HeadLayout
from seqdsl.lower import init
from seqdsl.lower.inputs import AttentionInputs, RecurrentInputs
from seqdsl.lower.conv_path import ConvPath
from seqdsl.lower.paths import PathChooser
from seqdsl.reference.attention import alibi_slopes, bias_dtype, repeat_heads, rope
from seqdsl.reference.features import feature_map


@dataclass(frozen=True)
class MixerState:
    """What a mixer carries from one call to the next while decoding.

    Softmax family: the key/value cache (k: B L Gk Dk, v: B L K Dv; shared heads are stored once,
    and the paths take them as stored) after rope. Recurrent family: the state
    S (B H Dk Dv). Both: the last inputs the short convolution and token shift need, and the
    number of tokens seen (rope and random keys are position-dependent)."""

    pos: int = 0
    k: Tensor | None = None
    v: Tensor | None = None
    S: Tensor | None = None
    # (B, H, L) decayed softmax: the score-bias row of the last position so far, [j] = sum of the
    # log decays of positions j+1..L-1, in the bias dtype: each entry its own sum of same-sign
    # terms (no cancellation, see `segment_sums`), from which the next rows follow exactly.
    decay_row: Tensor | None = None
    conv: Tensor | None = None  # (B, size-1, C) last pre-conv inputs
    shift: Tensor | None = None  # (B, D) last token for token shift


# The state before the first token, one module-level instance: a compiled forward reads it (a
# global) instead of building a dataclass inside the traced region (seqdsl/lower/lm.py: _FRESH).
FRESH = MixerState()


def _linear(p: ir.Linear) -> nn.Linear:
    return nn.Linear(p.inputs, p.outputs, bias=p.bias)


def _module(owner: nn.Module, p: ir.Linear) -> nn.Module:
    return owner.get_submodule(p.name)


# --- (1) inputs ------------------------------------------------------------------------------------


@dataclass(frozen=True)
class Projected:
    """Stage (1)'s result: q (B, T, H, Dk) or None (no queries), k (B, T, Gk, Dk) or None (keys
    not from the token), v (B, T, K, Dv); and what the next call needs: the conv's last inputs
    (B, size-1, C), the last token (B, D)."""

    q: Tensor | None
    k: Tensor | None
    v: Tensor
    conv: Tensor | None
    shift: Tensor | None


class InputStage:
    """`name` is the mixer's, for the conv path's messages."""

    def __init__(self, plan: ir.Inputs, layout: HeadLayout, owner: nn.Module, *, name: str):
        self.plan, self.layout = plan, layout
        self.conv_path = None if plan.conv is None else ConvPath(plan.conv, plan.channels, name)
        if plan.shift:
            owner.register_parameter("shift_mix", nn.Parameter(torch.full((3, plan.width), 0.5)))
        for p in plan.projections:
            owner.add_module(p.name, _linear(p))
        if plan.conv is not None:
            owner.register_parameter("conv_weight", nn.Parameter(torch.randn(plan.channels, plan.conv) / plan.conv))

    def __call__(self, m: nn.Module, x: Tensor, state: MixerState) -> Projected:
        B, T, _ = x.shape
        plan, lay = self.plan, self.layout
        inputs, shift = self._shifted(m, x, state)
        joined, conv = self._conv(m, self._project(m, inputs), state)
        parts = iter(joined.split([p.outputs for p in plan.projections], dim=-1))
        q = next(parts).view(B, T, lay.qk_groups, lay.key_dim) if plan.q is not None else None
        k = next(parts).view(B, T, lay.key_groups, lay.key_dim) if plan.k is not None else None
        v = next(parts).view(B, T, lay.kv_groups, lay.head_dim)
        return Projected(q=None if q is None else repeat_heads(q, lay.heads), k=k, v=v, conv=conv, shift=shift)

    def _shifted(self, m: nn.Module, x: Tensor, state: MixerState) -> tuple[list[Tensor], Tensor | None]:
        """The input of each projection that exists; token shift mixes each token with the
        previous one, with one learned mix per projection slot (q, k, v)."""
        slots = (self.plan.q, self.plan.k, self.plan.v)
        if not self.plan.shift:
            return [x for p in slots if p is not None], None
        prev = state.shift if state.shift is not None else torch.zeros_like(x[:, 0])
        x_prev = torch.cat([prev[:, None], x[:, :-1]], dim=1)
        mixed = [x + (x_prev - x) * mu for mu in m.get_parameter("shift_mix")]
        return [u for p, u in zip(slots, mixed) if p is not None], x[:, -1]

    def _project(self, m: nn.Module, inputs: list[Tensor]) -> Tensor:
        """The projections side by side on the last dim. Without a token shift the inputs are one
        tensor: one GEMM against the stacked weights then replaces three GEMMs and the copy that
        joined their outputs (the joined layout is what the convolution and the split read)."""
        projs = [_module(m, p) for p in self.plan.projections]
        if not self.plan.shift:
            return F.linear(inputs[0], torch.cat([p.get_parameter("weight") for p in projs]))
        return torch.cat([p(u) for p, u in zip(projs, inputs)], dim=-1)

    def _conv(self, m: nn.Module, u: Tensor, state: MixerState) -> tuple[Tensor, Tensor | None]:
        """Depthwise causal conv over time, then SiLU, with the last size-1 inputs carried across
        calls (seqdsl/reference/conv.py), on the path `conv_path` planned."""
        if self.conv_path is None:
            return u, None
        return self.conv_path(u, m.get_parameter("conv_weight"), state.conv)

    def reset(self, m: nn.Module, recipe: ir.Recipe, layer: int, n_layers: int) -> None:
        if self.plan.shift:
            m.get_parameter("shift_mix").copy_(init.token_shift_mix(self.plan.width, layer, n_layers, recipe))


# --- (2) relation ----------------------------------------------------------------------------------


class RelationStage:
    """`context` sizes the per-position tables (random keys, distances); `layer` picks the
    random key table's seed."""

    def __init__(self, plan: ir.Relation, layout: HeadLayout, owner: nn.Module, *, context: int, layer: int):
        self.plan, self.layout = plan, layout
        H, Dk = layout.heads, layout.key_dim
        match plan.keys:
            case "projected":
                pass
            case ir.KeyTable(seed=seed):  # one table per layer (heads differ within the draw)
                g = torch.Generator().manual_seed(layer_seed(seed, layer))
                owner.register_buffer("random_keys", torch.randn(context, H, Dk, generator=g) / math.sqrt(Dk))
            case "learned":
                owner.register_parameter("const_key", nn.Parameter(torch.randn(H, Dk) / math.sqrt(Dk)))
            case "distances":
                owner.register_parameter("distance_bias", nn.Parameter(torch.zeros(H, context)))
            case _:
                assert_never(plan.keys)
        if plan.qk_norm:
            owner.add_module("q_norm", nn.RMSNorm(Dk, elementwise_affine=True))
            owner.add_module("k_norm", nn.RMSNorm(Dk, elementwise_affine=True))
        if plan.position == "alibi":
            # float64 so that a float64 model has exact slopes; paths cast to the bias dtype
            owner.register_buffer("alibi", alibi_slopes(H, dtype=torch.float64), persistent=False)

    def __call__(self, m: nn.Module, x: Tensor, projected: Projected, pos: int) -> tuple[Tensor, Tensor]:
        """(q, k) after qk-norm, position and feature map: q (B, T, H, F); k (B, T, Gk, F) from
        the token, else (B, T, H, F)."""
        B, T, _ = x.shape
        H, Dk = self.layout.heads, self.layout.key_dim
        q = projected.q if projected.q is not None else x.new_zeros(B, T, H, Dk)
        k = self._keys(m, x, projected.k, pos)
        if self.plan.qk_norm:
            q, k = m.get_submodule("q_norm")(q), m.get_submodule("k_norm")(k)
        match self.plan.position:
            case ir.Rotary(base=base):
                q, k = rope(q, base, offset=pos), rope(k, base, offset=pos)
            case "alibi" | "none":  # ALiBi is a score bias (softmax) or an extra decay: stage (3)
                pass
            case _:
                assert_never(self.plan.position)
        return self.features(q, k)

    def features(self, q: Tensor, k: Tensor) -> tuple[Tensor, Tensor]:
        """phi(q), phi(k), their inputs scaled as the plan says (`Relation.feature_scales`)."""
        q_scale, k_scale = self.plan.feature_scales
        q, k = (q * q_scale if q_scale != 1.0 else q), (k * k_scale if k_scale != 1.0 else k)
        return feature_map(q, self.plan.feature), feature_map(k, self.plan.feature)

    def _keys(self, m: nn.Module, x: Tensor, projected: Tensor | None, pos: int) -> Tensor:
        B, T, _ = x.shape
        H, Dk = self.layout.heads, self.layout.key_dim
        match self.plan.keys:
            case "projected":
                assert projected is not None, "a dot relation projects its keys (stage 1)"
                return projected
            case ir.KeyTable():
                return m.get_buffer("random_keys")[pos:pos + T].to(x.dtype).expand(B, T, H, Dk)
            case "learned":
                return m.get_parameter("const_key").to(x.dtype).expand(B, T, H, Dk)
            case "distances":  # no keys: the scores are stage (3)'s distance table
                return x.new_zeros(B, T, H, Dk)
            case _:
                assert_never(self.plan.keys)


def layer_seed(seed: int, layer: int) -> int:
    """The seed of layer `layer`'s random key table: `seed` itself for layer 0 (a one-layer
    model draws what it always drew), else 32 bits of sha256(seed, layer). Not seed + layer:
    neighbouring seeds would share tables across layers; and torch's CPU generator keeps only
    the low 32 bits of a seed, so no wider combination would do."""
    if layer == 0:
        return seed
    digest = hashlib.sha256(f"random_keys:{seed}:{layer}".encode()).digest()
    return int.from_bytes(digest[:4], "little")


# --- (3) mixing: what both families share -------------------------------------------------------------


class LearnedFactor:
    """The learned per-head scale and temperature (`learned(init)`), each stored as a log so that
    it stays positive, folded into q: the scores q.k scale_h / T_h, with the path's own scale and
    temperature at their fixed values (the kernel key's `scale` and `temperature` are 1 for a
    learned one)."""

    def __init__(self, plan: ir.LearnedFactors, heads: int, owner: nn.Module):
        self.plan = plan
        if plan.scale is not None:
            owner.register_parameter("log_scale", nn.Parameter(torch.full((heads,), math.log(plan.scale))))
        if plan.temperature is not None:
            owner.register_parameter("log_temperature", nn.Parameter(torch.full((heads,), math.log(plan.temperature))))

    def __call__(self, m: nn.Module, q: Tensor) -> Tensor:
        factor: Tensor | None = None
        if self.plan.scale is not None:
            factor = m.get_parameter("log_scale")
        if self.plan.temperature is not None:
            # the language's lower bound (nodes.MIN_TEMPERATURE) holds while it trains, not only
            # at its initial value: below it the scores only sharpen rounding noise
            log_t = m.get_parameter("log_temperature").clamp_min(math.log(nodes.MIN_TEMPERATURE))
            factor = -log_t if factor is None else factor - log_t
        if factor is None:
            return q
        return q * factor.exp().to(q.dtype)[:, None]  # (H, 1) over (B, T, H, F)


class DecayStage:
    """The decay's parameters and its log decay per step (ir.Decay says which parametrisation)."""

    def __init__(self, plan: ir.Decay, layout: HeadLayout, owner: nn.Module):
        self.plan, self.layout = plan, layout
        match plan:
            case None:
                pass
            case ir.FixedDecay(log_gammas=log_gammas):
                owner.register_buffer("const_log_decay", torch.tensor(log_gammas, dtype=torch.float64),
                                      persistent=False)
            case ir.ScalarDecay(step=step):
                owner.add_module(step.name, _linear(step))
                owner.register_parameter("A_log", nn.Parameter(torch.zeros(layout.heads)))
            case ir.GateDecay(down=down, up=up):
                owner.add_module(down.name, _linear(down))
                owner.add_module(up.name, _linear(up))
            case ir.SelectiveDecay(down=down, up=up, rates=rates):
                owner.add_module(down.name, _linear(down))
                owner.add_module(up.name, _linear(up))
                owner.register_parameter("rate_log", nn.Parameter(torch.zeros(layout.heads, rates)))
            case _:
                assert_never(plan)

    def log_decay(self, m: nn.Module, x: Tensor) -> Tensor | None:
        """(B, T, H) or (B, T, H, Dk) log decays, all <= 0, or None for no decay and for the
        selective step (which arrives as RecurrentInputs.dt and .rate instead: `selective`)."""
        B, T, _ = x.shape
        H = self.layout.heads
        match self.plan:
            case None | ir.SelectiveDecay():
                return None
            case ir.FixedDecay():
                return m.get_buffer("const_log_decay").to(x.dtype).expand(B, T, H)
            case ir.ScalarDecay(step=step):
                return -torch.exp(m.get_parameter("A_log")) * F.softplus(_module(m, step)(x))
            case ir.GateDecay(down=down, up=up):
                gate = _module(m, up)(_module(m, down)(x))
                return F.logsigmoid(gate).view(B, T, H, self.layout.key_dim) / init.GATE_NORMALISER
            case _:
                assert_never(self.plan)

    def selective(self, m: nn.Module, x: Tensor, mixed: RecurrentInputs) -> None:
        """Mamba-1's step size and rate, in float32 at least whatever autocast does: the step's
        exp and products."""
        match self.plan:
            case ir.SelectiveDecay(down=down, up=up):
                dtype = torch.promote_types(x.dtype, torch.float32)
                mixed.dt = F.softplus(_module(m, up)(_module(m, down)(x)).to(dtype))
                mixed.rate = -torch.exp(m.get_parameter("rate_log").to(dtype))
            case None | ir.FixedDecay() | ir.ScalarDecay() | ir.GateDecay():  # a log decay: `log_decay`
                pass
            case _:
                assert_never(self.plan)

    def reset(self, m: nn.Module, recipe: ir.Recipe, layer: int, n_layers: int) -> None:
        H = self.layout.heads
        match self.plan:
            case None | ir.FixedDecay():
                pass
            case ir.ScalarDecay(step=step):
                proj = _module(m, step)
                proj.get_parameter("bias").copy_(init.dt_bias(H))
                m.get_parameter("A_log").copy_(init.a_log(H, low=0.0 if recipe == "gated_deltanet" else 1.0))
                if recipe == "mamba2":  # mamba_ssm's in_proj keeps nn.Linear's default init
                    nn.init.kaiming_uniform_(proj.get_parameter("weight"), a=math.sqrt(5))
                else:  # fla's a_proj: N(0, initializer_range = 0.02)
                    nn.init.normal_(proj.get_parameter("weight"), std=0.02)
            case ir.GateDecay(down=down, up=up):
                self._reset_gate(_module(m, down), _module(m, up), recipe, layer, n_layers)
            case ir.SelectiveDecay(down=down, up=up):  # mamba_ssm/modules/mamba_simple.py: S4D-real A, dt_init
                nn.init.kaiming_uniform_(_module(m, down).get_parameter("weight"), a=math.sqrt(5))  # x_proj's
                bound = up.inputs ** -0.5
                nn.init.uniform_(_module(m, up).get_parameter("weight"), -bound, bound)
                _module(m, up).get_parameter("bias").copy_(init.dt_bias(H))
                m.get_parameter("rate_log").copy_(init.s4d_real_log_rate(H, self.plan.rates))
            case _:
                assert_never(self.plan)

    def _reset_gate(self, down: nn.Module, up: nn.Module, recipe: ir.Recipe, layer: int, n_layers: int) -> None:
        C, Dk = self.layout.heads * self.layout.key_dim, self.layout.key_dim
        if recipe in ("rwkv6", "rwkv7"):
            # RWKV's decay LoRA starts with w1 = 0: the initial decay is the fixed w0 ramp
            nn.init.zeros_(down.get_parameter("weight"))
            if recipe == "rwkv6":  # time_decay_w2 ~ U(-0.01, 0.01)
                nn.init.uniform_(up.get_parameter("weight"), -0.01, 0.01)
                log_decay = init.rwkv6_log_decay(C, layer, n_layers)
            else:  # w2 = ortho_init(., 0.1)
                nn.init.orthogonal_(up.get_parameter("weight"), gain=0.1)
                log_decay = init.rwkv7_log_decay(C, Dk, layer, n_layers)
            up.get_parameter("bias").copy_(init.gate_bias_for(log_decay))
            return
        # GLA (fla's model init: N(0, 0.02), bias 0) and Mamba-1's S4D-real decay
        nn.init.normal_(down.get_parameter("weight"), std=0.02)
        nn.init.normal_(up.get_parameter("weight"), std=0.02)
        if recipe == "mamba1":
            up.get_parameter("bias").copy_(init.gate_bias_for(init.mamba1_log_decay(self.layout.heads, Dk).flatten()))
        else:
            nn.init.zeros_(up.get_parameter("bias"))


# --- (3) mixing: the softmax family ----------------------------------------------------------------------


class AttentionMixing:
    """Attention or top-k selection over the cached keys, with the additive score biases of a
    decay and of a positional relation (ALiBi's slopes go to the path as they are)."""

    def __init__(self, plan: ir.Mixing, layout: HeadLayout, owner: nn.Module):
        self.plan = plan
        self.learned = LearnedFactor(plan.learned, layout.heads, owner)
        self.decay = DecayStage(plan.decay, layout, owner)

    def __call__(self, m: nn.Module, paths: PathChooser, x: Tensor, q: Tensor, k: Tensor, v: Tensor,
                 state: MixerState) -> tuple[Tensor, dict[str, Tensor | None]]:
        k_all = k if state.k is None else torch.cat([state.k, k], dim=1)
        v_all = v if state.v is None else torch.cat([state.v, v], dim=1)
        bias, decay_row = self.score_bias(m, x, state, k_all.shape[1])
        alibi = m.get_buffer("alibi") if self.plan.key.position == "alibi" else None
        o = paths.attention(AttentionInputs(  # k, v as cached: Gk and K heads
            q=self.learned(m, q), k=k_all, v=v_all, pos=state.pos, bias=bias, alibi=alibi))
        return o, dict(k=k_all, v=v_all, decay_row=decay_row)

    def score_bias(self, m: nn.Module, x: Tensor, state: MixerState, L: int) -> tuple[Tensor | None, Tensor | None]:
        """The additive (B or 1, H, T, L) biases of the T new queries (positions pos..pos+T-1)
        over all L keys, from a positional relation and a decay, in `bias_dtype` (float64 stays
        float64, anything else is float32); and the decay's last bias row to carry. A decoding
        step builds its (1, L) row, never the (L, L) matrix."""
        dtype = bias_dtype(x.dtype)
        T = x.shape[1]
        bias, decay_row = None, None
        if self.plan.key.relation == "positional":
            i = torch.arange(state.pos, state.pos + T, device=x.device)
            dist = (i[:, None] - torch.arange(L, device=x.device)[None, :]).clamp(min=0)
            bias = m.get_parameter("distance_bias")[:, dist].to(dtype)  # (H, T, L)
        log_decay = self.decay.log_decay(m, x)
        if log_decay is not None:
            decay_bias = segment_sums(log_decay.to(dtype).transpose(1, 2), state.decay_row)  # (B, H, T, L)
            decay_row = decay_bias[..., -1, :]
            bias = decay_bias if bias is None else bias + decay_bias
        return bias, decay_row

    def reset(self, m: nn.Module, recipe: ir.Recipe, layer: int, n_layers: int) -> None:
        self.decay.reset(m, recipe, layer, n_layers)


def segment_sums(log_decay: Tensor, previous_row: Tensor | None = None) -> Tensor:
    """The score bias of a decayed softmax, [i, j] = sum_{j < s <= i} log a_s (0 for j >= i),
    for the rows of new positions only.

    log_decay (..., T): the log decays of positions p..p+T-1. previous_row (..., p): the bias row
    of position p-1 (what the previous call returned as its last row), None when p = 0.
    Returns (..., T, p+T): rows p..p+T-1 over every key 0..p+T-1. With p = 0 that is the whole
    (L, L) bias; a decoding step (T = 1) costs one row, O(L).

    Why not cum_i - cum_j: the cumulative sums grow with L (-5 per token is -20000 at L = 4096)
    while the weights that matter have a bias of order 1, so the difference keeps only the last
    digits (docs/lowering.md, "Numerics of the score biases"). Here every entry is summed from
    its own terms, all <= 0, starting at s = j + 1: a sum of same-sign terms has no cancellation,
    so its rounding error is at most (i - j) * eps * |entry| (recursive summation, Higham,
    Accuracy and Stability of Numerical Algorithms, §4.2), whatever the position. Row i is row
    i-1 plus log a_i on the columns j < i, the recursion of the cumsum below: a forward in pieces
    adds the same terms in the same order as one forward over everything."""
    T = log_decay.shape[-1]
    p = 0 if previous_row is None else previous_row.shape[-1]
    s = torch.arange(p, p + T, device=log_decay.device)
    later = s[:, None] > torch.arange(p + T, device=log_decay.device)[None, :]  # [s, j]: s > j
    terms = log_decay[..., :, None].expand(*log_decay.shape, p + T).masked_fill(~later, 0.0)
    if previous_row is None:
        return terms.cumsum(dim=-2)  # [i, j] = sum_{s <= i} terms[s, j]
    start = F.pad(previous_row, (0, T))[..., None, :]  # row p-1, zeros for j >= p-1
    return torch.cat([start, terms], dim=-2).cumsum(dim=-2)[..., 1:, :]


# --- (3) mixing: the recurrent family --------------------------------------------------------------------


class UpdateStage:
    """The state update rule's own parameters and inputs (ir.Update says which rule)."""

    def __init__(self, plan: ir.Update, layout: HeadLayout, owner: nn.Module):
        self.plan, self.layout = plan, layout
        match plan:
            case "additive":
                pass
            case "bonus":
                owner.register_parameter("bonus", nn.Parameter(torch.zeros(layout.heads, layout.key_dim)))
            case ir.DeltaRule(beta=p) | ir.Rwkv7Rule(a=p):
                owner.add_module(p.name, _linear(p))
            case _:
                assert_never(plan)

    def keys(self, q: Tensor, k: Tensor) -> tuple[Tensor, Tensor]:
        """Delta rules need unit-norm keys so that (I - beta k k^T) is a contraction; q is
        normalised too (DeltaNet's choice), and scaled after, so the scale survives."""
        match self.plan:
            case ir.DeltaRule():
                return F.normalize(q, dim=-1), F.normalize(k, dim=-1)
            case "additive" | "bonus" | ir.Rwkv7Rule():  # RWKV-7 normalises its removal key only
                return q, k
            case _:
                assert_never(self.plan)

    def inputs(self, m: nn.Module, x: Tensor, mixed: RecurrentInputs) -> None:
        B, T, _ = x.shape
        match self.plan:
            case "additive":
                pass
            case "bonus":
                mixed.bonus = m.get_parameter("bonus")
            case ir.DeltaRule(beta=beta):
                mixed.beta = torch.sigmoid(_module(m, beta)(x))
            case ir.Rwkv7Rule(a=a):
                mixed.a = torch.sigmoid(_module(m, a)(x)).view(B, T, self.layout.heads, self.layout.key_dim)
                mixed.kappa = F.normalize(mixed.k, dim=-1)
            case _:
                assert_never(self.plan)

    def reset(self, m: nn.Module, layer: int, n_layers: int) -> None:
        lay = self.layout
        match self.plan:
            case "additive":
                pass
            case "bonus":
                m.get_parameter("bonus").copy_(init.rwkv6_bonus(lay.heads, lay.key_dim, layer, n_layers))
            case ir.DeltaRule(beta=beta):  # fla's b_proj: N(0, 0.02), no bias: beta about 1/2
                nn.init.normal_(_module(m, beta).get_parameter("weight"), std=0.02)
                nn.init.zeros_(_module(m, beta).get_parameter("bias"))
            case ir.Rwkv7Rule(a=a):  # RWKV-7's a = sigmoid(a0 + LoRA), LoRA w1 = 0
                nn.init.zeros_(_module(m, a).get_parameter("weight"))
                _module(m, a).get_parameter("bias").copy_(init.rwkv7_a_bias(lay.heads * lay.key_dim, lay.key_dim))
            case _:
                assert_never(self.plan)


class RecurrentMixing:
    """The state recurrence: inputs in the reference's conventions (seqdsl.lower.paths.RecurrentInputs)."""

    def __init__(self, plan: ir.Mixing, layout: HeadLayout, owner: nn.Module):
        self.plan, self.layout = plan, layout
        self.learned = LearnedFactor(plan.learned, layout.heads, owner)
        self.decay = DecayStage(plan.decay, layout, owner)
        self.update = UpdateStage(plan.update, layout, owner)

    def __call__(self, m: nn.Module, paths: PathChooser, x: Tensor, q: Tensor, k: Tensor, v: Tensor,
                 state: MixerState) -> tuple[Tensor, dict[str, Tensor | None]]:
        H = self.layout.heads
        o, S = paths.recurrent(self.inputs(m, x, q, repeat_heads(k, H), repeat_heads(v, H)), state.S)
        return o, dict(S=S)

    def inputs(self, m: nn.Module, x: Tensor, q: Tensor, k: Tensor, v: Tensor) -> RecurrentInputs:
        B, T, _ = x.shape
        q, k = self.update.keys(q, k)
        mixed = RecurrentInputs(q=self.learned(m, q * self.plan.key.scale), k=k, v=v,
                                log_decay=self._log_decay(m, x))
        self.decay.selective(m, x, mixed)
        self.update.inputs(m, x, mixed)
        if self.plan.key.weights == "normalized_linear":
            # carry the normaliser z_t = sum_j decay * phi(k_j) as an extra value column of ones
            mixed.v = torch.cat([v, v.new_ones(B, T, self.layout.heads, 1)], dim=-1)
        return mixed

    def _log_decay(self, m: nn.Module, x: Tensor) -> Tensor | None:
        """The decay's log decay, plus ALiBi's: its -m (i - j) score penalty, in a recurrence, is
        an extra constant decay e^-m per head."""
        log_decay = self.decay.log_decay(m, x)
        if self.plan.key.position != "alibi":
            return log_decay
        B, T, _ = x.shape
        H = self.layout.heads
        alibi = (-m.get_buffer("alibi")).to(x.dtype).view(1, 1, H)
        if log_decay is None:
            return alibi.expand(B, T, H)
        return log_decay + alibi if log_decay.dim() == 3 else log_decay + alibi[..., None]

    def reset(self, m: nn.Module, recipe: ir.Recipe, layer: int, n_layers: int) -> None:
        self.decay.reset(m, recipe, layer, n_layers)
        self.update.reset(m, layer, n_layers)


# --- (4) output ------------------------------------------------------------------------------------------

class OutputStage:
    def __init__(self, plan: ir.Output, layout: HeadLayout, owner: nn.Module):
        self.plan, self.layout = plan, layout
        match plan.norm:
            case "none":
                pass
            case "rmsnorm":
                owner.add_module("out_norm", nn.RMSNorm(layout.head_dim))
            case "groupnorm":
                owner.add_module("out_norm", nn.GroupNorm(layout.heads, layout.heads * layout.head_dim))
            case _:
                assert_never(plan.norm)
        if plan.gate is not None:
            owner.add_module(plan.gate.proj.name, _linear(plan.gate.proj))
        owner.add_module(plan.proj.name, _linear(plan.proj))

    def __call__(self, m: nn.Module, o: Tensor, x: Tensor) -> Tensor:
        """o (B, T, H, Dv), or Dv + 1 columns with the normaliser -> (B, T, D)."""
        B, T = x.shape[:2]
        if self.plan.normalise:
            o = o[..., :-1] / (o[..., -1:] + 1e-6)  # eps: phi(q).z can be 0 for relu features
        match self.plan.norm:
            case "rmsnorm":
                o = m.get_submodule("out_norm")(o).reshape(B, T, -1)
            case "groupnorm":
                o = m.get_submodule("out_norm")(o.reshape(B * T, -1)).view(B, T, -1)
            case "none":
                o = o.reshape(B, T, -1)
            case _:
                assert_never(self.plan.norm)
        if self.plan.gate is not None:
            o = o * _gate(self.plan.gate.activation, _module(m, self.plan.gate.proj)(x))
        return _module(m, self.plan.proj)(o)

    def reset(self, m: nn.Module, recipe: ir.Recipe, layer: int, n_layers: int) -> None:
        if recipe == "rwkv7" and self.plan.norm == "groupnorm":
            # RWKV-7's ln_x weight ((layer + 1) / L)^0.7: deeper layers write more at first
            nn.init.constant_(m.get_submodule("out_norm").get_parameter("weight"), ((layer + 1) / n_layers) ** 0.7)


def _gate(activation: Literal["swish", "sigmoid"], u: Tensor) -> Tensor:
    match activation:
        case "swish":
            return F.silu(u)
        case "sigmoid":
            return torch.sigmoid(u)
        case _:
            assert_never(activation)
