"""Lower a resolved `Mixer` to a `torch.nn.Module`.

Shape legend
    B batch   T new tokens   L tokens so far (cache + new)   D d_model
    H heads   Dk key dim (state rows)   Dv head dim (value width)   F feature dim of phi
    G query/key groups (qk_groups)   K key/value groups (kv_groups, grouped-query attention)

`MixerModule.forward(x, state)` runs the spec in four stages, numbered as in the code:

    (1) inputs      token shift / causal conv, projections to q, k, v per head
    (2) relation    keys from content (dot), frozen random, constant, or none (positional);
                    feature map, qk-norm, position (rope on q and k; alibi as a score bias for
                    softmax, as extra per-head log decay for the recurrent family)
    (3) mixing      softmax family: attention / top-k selection over cached keys;
                    recurrent family: state recurrence with decay and update rule.
                    The computation itself is done by a *path* (seqdsl.lower.paths): the
                    reference oracle or a fast kernel, chosen per device and reported.
    (4) output      per-head norm, output gate, output projection

The mixer is a faithful member of each architecture's family, not a bit-exact port: e.g. Mamba's
B and C are per-head projections of the token (q and k here), its dt-scaled input is the key
write. Parameter shapes follow the spec, so specs that differ in one slot differ in one place.
"""

from __future__ import annotations

import hashlib
import math
from dataclasses import dataclass, replace

import torch
import torch.nn.functional as F
from torch import Tensor, nn

from seqdsl.errors import SeqError
from seqdsl.ir import nodes
from seqdsl.ir.conflicts import conflicts
from seqdsl.ir.flops import step_rank
from seqdsl.ir.key import dense_at, kernel_key
from seqdsl.ir.layout import LayoutError, head_layout
from seqdsl.ir.schedules import retnet_log_gammas
from seqdsl.lower import init
from seqdsl.lower.paths import AttentionInputs, PathChooser, RecurrentInputs
from seqdsl.reference.attention import alibi_slopes, bias_dtype, repeat_heads, rope
from seqdsl.reference.features import feature_map


class LoweringError(SeqError):
    """A spec that parses and type-checks but has no PyTorch meaning."""


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


class MixerModule(nn.Module):
    """`layer` (0-based) and `n_layers` place the mixer in its model: per-layer initialisations
    (RWKV's decay speeds) and per-layer random key tables depend on them."""

    def __init__(self, mixer: nodes.Mixer, d_model: int, *, context: int = 2048, layer: int = 0,
                 n_layers: int = 1):
        super().__init__()
        self.spec = mixer
        self.d_model = d_model
        self.context = context
        if not 0 <= layer < n_layers:
            raise ValueError(f"layer {layer} is not in a model of {n_layers} layers")
        self.layer, self.n_layers = layer, n_layers
        problems = [c.message for c in conflicts(mixer)]
        if problems:
            raise LoweringError(f"mixer `{mixer.name}` cannot be lowered: " + "; ".join(problems),
                                hint="`seqdsl check` reports these as W001 with their places")
        try:
            layout = head_layout(mixer, d_model)
        except LayoutError as err:
            raise LoweringError(str(err), hint=err.fix) from None
        # G query/key projections, each shared by H / G heads (Mamba's ngroups); or K key/value
        # projections, each shared by H / K heads (grouped-query attention)
        self.H, self.Dk, self.Dv, self.G = H, Dk, Dv, G = (
            layout.heads, layout.key_dim, layout.head_dim, layout.qk_groups)
        self.Gk, self.K = Gk, K = layout.key_groups, layout.kv_groups
        # what stage (3) is specialised on, computed once from the IR: paths plan from this
        self.key = kernel_key(mixer, d_model, layout)
        rel = mixer.relation
        self.feature = self.key.feature
        self.F = self.key.feature_dim

        # (1) inputs
        if isinstance(mixer.conv, nodes.TokenShift):
            self.shift_mix = nn.Parameter(torch.full((3, d_model), 0.5))
        self.uses_q = not isinstance(rel, nodes.Positional)
        self.uses_k = isinstance(rel, nodes.Dot)
        if self.uses_q:
            self.q_proj = nn.Linear(d_model, G * Dk, bias=False)
        if self.uses_k:
            self.k_proj = nn.Linear(d_model, Gk * Dk, bias=False)
        self.v_proj = nn.Linear(d_model, K * Dv, bias=False)
        if isinstance(mixer.conv, nodes.CausalConv):
            channels = G * Dk * self.uses_q + Gk * Dk * self.uses_k + K * Dv
            self.conv_weight = nn.Parameter(torch.randn(channels, mixer.conv.size) / mixer.conv.size)

        # (2) relation
        if isinstance(rel, nodes.RandomKeys):
            # one table per layer (heads differ within the draw), deterministic in (seed, layer)
            g = torch.Generator().manual_seed(layer_seed(rel.seed, layer))
            self.register_buffer("random_keys", torch.randn(context, H, Dk, generator=g) / math.sqrt(Dk))
        elif isinstance(rel, nodes.ConstKeys):
            self.const_key = nn.Parameter(torch.randn(H, Dk) / math.sqrt(Dk))
        elif isinstance(rel, nodes.Positional):
            self.distance_bias = nn.Parameter(torch.zeros(H, context))
        if isinstance(rel, nodes.Dot) and rel.qk_norm:
            self.q_norm = nn.RMSNorm(Dk, elementwise_affine=True)
            self.k_norm = nn.RMSNorm(Dk, elementwise_affine=True)
        if isinstance(mixer.position, nodes.Alibi):
            # float64 so that a float64 model has exact slopes; paths cast to the bias dtype
            self.register_buffer("alibi", alibi_slopes(H, dtype=torch.float64), persistent=False)
        # learned scale / temperature: one per head, stored as a log so it stays positive
        if isinstance(rel, nodes.Dot) and isinstance(rel.scale, nodes.Learned):
            self.log_scale = nn.Parameter(torch.full((H,), math.log(rel.scale.init)))
        temperature = getattr(mixer.weights, "temperature", None)
        if isinstance(temperature, nodes.Learned):
            self.log_temperature = nn.Parameter(torch.full((H,), math.log(temperature.init)))

        # (3) mixing parameters of the recurrent family
        decay = mixer.decay
        if isinstance(decay, nodes.ConstantDecay):
            log_gammas = retnet_log_gammas(H) if decay.gamma == "auto" else [math.log(decay.gamma)] * H
            self.register_buffer("const_log_decay", torch.tensor(log_gammas, dtype=torch.float64),
                                 persistent=False)
        elif isinstance(decay, nodes.DataDependentDecay) and decay.granularity == "selective":
            # Mamba-1: dt_t = softplus(W_up W_down x_t + b) per head (low rank: Mamba's dt_rank),
            # log a_t[k] = -dt_t exp(A_log[h, k]), the write scaled by dt_t
            self.dt_down = nn.Linear(d_model, step_rank(d_model), bias=False)
            self.dt_up = nn.Linear(step_rank(d_model), H, bias=True)
            self.rate_log = nn.Parameter(torch.zeros(H, self.F))  # one rate per state row
        elif isinstance(decay, nodes.DataDependentDecay) and decay.granularity == "scalar":
            # Mamba-2: log a_t = -exp(A) * softplus(W x_t + b), A per head
            self.dt_proj = nn.Linear(d_model, H, bias=True)
            self.A_log = nn.Parameter(torch.zeros(H))
        elif isinstance(decay, nodes.DataDependentDecay):
            # GLA: log a_t = logsigmoid(W2 W1 x_t + b) / 16, a low-rank per-channel gate
            self.decay_down = nn.Linear(d_model, init.GATE_RANK, bias=False)
            self.decay_up = nn.Linear(init.GATE_RANK, H * Dk, bias=True)
        update = mixer.update
        if isinstance(update, nodes.Delta):
            self.beta_proj = nn.Linear(d_model, H, bias=True)
        elif isinstance(update, nodes.Additive) and update.bonus:
            self.bonus = nn.Parameter(torch.zeros(H, Dk))
        elif isinstance(update, nodes.Rwkv7):
            self.a_proj = nn.Linear(d_model, H * Dk, bias=True)

        # (4) output
        if isinstance(mixer.norm, nodes.RmsNorm):
            self.out_norm = nn.RMSNorm(Dv)
        elif isinstance(mixer.norm, nodes.GroupNorm):
            self.out_norm = nn.GroupNorm(H, H * Dv)
        if not isinstance(mixer.gate, nodes.NoGate):
            self.gate_proj = nn.Linear(d_model, H * Dv, bias=False)
        self.o_proj = nn.Linear(H * Dv, d_model, bias=False)
        self.paths = PathChooser(self.key, mixer.name, dense=dense_at(self.key, context))
        self.reset_mixing_parameters()

    @torch.no_grad()
    def reset_mixing_parameters(self) -> None:
        """The initialisation of the decay, gate, bonus and token-shift parameters that this
        mixer's family's reference implementation uses (seqdsl/lower/init.py; docs/lowering.md,
        "Initialisation"). Called at construction, and by the LM after its N(0, 0.02) init of
        every Linear, which would otherwise overwrite the biases that carry these recipes."""
        if self.o_proj.weight.is_meta:
            return  # a model built on the meta device (sizes only) has no values to set
        family = init.recipe(self.spec, self.Dv)
        H, Dk, layer, n_layers = self.H, self.Dk, self.layer, self.n_layers
        if hasattr(self, "shift_mix"):
            self.shift_mix.copy_(init.token_shift_mix(self.d_model, layer, n_layers, family))
        if hasattr(self, "dt_proj"):
            self.dt_proj.bias.copy_(init.dt_bias(H))
            self.A_log.copy_(init.a_log(H, low=0.0 if family == "gated_deltanet" else 1.0))
            if family == "mamba2":  # mamba_ssm's in_proj keeps nn.Linear's default init
                nn.init.kaiming_uniform_(self.dt_proj.weight, a=math.sqrt(5))
            else:  # fla's a_proj: N(0, initializer_range = 0.02)
                nn.init.normal_(self.dt_proj.weight, std=0.02)
        if hasattr(self, "dt_up"):  # Mamba-1 (mamba_ssm/modules/mamba_simple.py): S4D-real A, dt_init
            nn.init.kaiming_uniform_(self.dt_down.weight, a=math.sqrt(5))  # x_proj: nn.Linear's default
            rank = self.dt_up.in_features
            nn.init.uniform_(self.dt_up.weight, -rank ** -0.5, rank ** -0.5)
            self.dt_up.bias.copy_(init.dt_bias(H))
            self.rate_log.copy_(init.s4d_real_log_rate(H, self.F))
        if hasattr(self, "decay_up"):
            if family in ("rwkv6", "rwkv7"):
                # RWKV's decay LoRA starts with w1 = 0: the initial decay is the fixed w0 ramp
                nn.init.zeros_(self.decay_down.weight)
                if family == "rwkv6":  # time_decay_w2 ~ U(-0.01, 0.01)
                    nn.init.uniform_(self.decay_up.weight, -0.01, 0.01)
                    log_decay = init.rwkv6_log_decay(H * Dk, layer, n_layers)
                else:  # w2 = ortho_init(., 0.1)
                    nn.init.orthogonal_(self.decay_up.weight, gain=0.1)
                    log_decay = init.rwkv7_log_decay(H * Dk, Dk, layer, n_layers)
                self.decay_up.bias.copy_(init.gate_bias_for(log_decay))
            else:  # GLA (fla's model init: N(0, 0.02), bias 0) and Mamba-1's S4D-real decay
                nn.init.normal_(self.decay_down.weight, std=0.02)
                nn.init.normal_(self.decay_up.weight, std=0.02)
                if family == "mamba1":
                    self.decay_up.bias.copy_(init.gate_bias_for(init.mamba1_log_decay(H, Dk).flatten()))
                else:
                    nn.init.zeros_(self.decay_up.bias)
        if hasattr(self, "beta_proj"):  # fla's b_proj: N(0, 0.02), no bias: beta about 1/2
            nn.init.normal_(self.beta_proj.weight, std=0.02)
            nn.init.zeros_(self.beta_proj.bias)
        if hasattr(self, "bonus"):
            self.bonus.copy_(init.rwkv6_bonus(H, Dk, layer, n_layers))
        if hasattr(self, "a_proj"):  # RWKV-7's a = sigmoid(a0 + LoRA), LoRA w1 = 0
            nn.init.zeros_(self.a_proj.weight)
            self.a_proj.bias.copy_(init.rwkv7_a_bias(H * Dk, Dk))
        if family == "rwkv7" and isinstance(self.spec.norm, nodes.GroupNorm):
            # RWKV-7's ln_x weight ((layer + 1) / L)^0.7: deeper layers write more at first
            nn.init.constant_(self.out_norm.weight, ((layer + 1) / n_layers) ** 0.7)

    # --- (1) inputs --------------------------------------------------------------------------------

    def _shifted(self, x: Tensor, state: MixerState) -> tuple[list[Tensor], Tensor | None]:
        """Per-projection inputs; token shift mixes each token with the previous one."""
        if not hasattr(self, "shift_mix"):
            return [x, x, x], None
        prev = state.shift if state.shift is not None else torch.zeros_like(x[:, 0])
        x_prev = torch.cat([prev[:, None], x[:, :-1]], dim=1)
        mixed = [x + (x_prev - x) * mu for mu in self.shift_mix]
        return mixed, x[:, -1]

    def _project(self, inputs: list[Tensor]) -> tuple[Tensor, list[int]]:
        """The used projections of (xq, xk, xv), side by side on the last dim, and their widths.
        Without a token shift the three inputs are one tensor: one GEMM against the stacked
        weights then replaces three GEMMs and the copy that joined their outputs (the joined
        layout is what the convolution and the split read)."""
        projs = ([self.q_proj] if self.uses_q else []) + ([self.k_proj] if self.uses_k else []) + [self.v_proj]
        used = [inputs[i] for i, flag in enumerate((self.uses_q, self.uses_k, True)) if flag]
        widths = [p.out_features for p in projs]
        if all(u is used[0] for u in used):
            return F.linear(used[0], torch.cat([p.weight for p in projs])), widths
        return torch.cat([p(u) for p, u in zip(projs, used)], dim=-1), widths

    def _conv(self, u: Tensor, state: MixerState) -> tuple[Tensor, Tensor | None]:
        """Depthwise causal conv over time, with the last size-1 inputs carried across calls."""
        if not hasattr(self, "conv_weight"):
            return u, None
        size = self.conv_weight.shape[1]
        B, T, C = u.shape
        past = state.conv if state.conv is not None else u.new_zeros(B, size - 1, C)
        full = torch.cat([past, u], dim=1)  # (B, size-1+T, C)
        # A sum over the taps (= a depthwise conv1d) in the (B, T, C) layout, on every device.
        # F.conv1d wants (B, C, T): on the CPU it takes seconds per call in float64 on decoding's
        # few-token inputs (torch 2.13); on an H100 its depthwise kernels and the two transposes
        # took 57 of a compiled 110m Mamba-2 step's 216 ms (bf16, 16 x 2K), yet the step with
        # the taps fused by inductor instead ran at the same speed (docs/mamba.md, 2026-11-23).
        out = sum(full[:, s:s + T] * self.conv_weight[:, s] for s in range(size))
        return F.silu(out), full[:, full.shape[1] - (size - 1):]

    # --- forward -----------------------------------------------------------------------------------

    def forward(self, x: Tensor, state: MixerState | None = None, *,
                keep_state: bool = True) -> tuple[Tensor, MixerState | None]:
        """(output, the state after x). keep_state=False (a training step from position 0) builds
        no state and returns None for it: nothing reads it, and a dataclass built inside a
        `torch.compile`d region breaks the graph on some PyTorch versions (2.11)."""
        state = state if state is not None else FRESH
        B, T, _ = x.shape
        H, Dk, Dv = self.H, self.Dk, self.Dv
        pos = state.pos
        if pos + T > self.context and self.per_position:
            raise LoweringError(f"mixer `{self.spec.name}` has per-position parameters for "
                                f"{self.context} tokens; got position {pos + T}")

        # (1) inputs: shift, project, convolve
        inputs, shift = self._shifted(x, state)
        projected, widths = self._project(inputs)
        fused, conv_state = self._conv(projected, state)
        parts = list(fused.split(widths, dim=-1))
        v = parts.pop().view(B, T, self.K, Dv)
        q = self._heads(parts.pop(0), self.G) if self.uses_q else x.new_zeros(B, T, H, Dk)

        # (2) relation: where the keys come from, then norm, position and feature map
        if self.uses_k:
            k = parts.pop(0).view(B, T, self.Gk, Dk)
        elif hasattr(self, "random_keys"):
            k = self.random_keys[pos:pos + T].to(x.dtype).expand(B, T, H, Dk)
        elif hasattr(self, "const_key"):
            k = self.const_key.to(x.dtype).expand(B, T, H, Dk)
        else:
            k = x.new_zeros(B, T, H, Dk)
        if hasattr(self, "q_norm"):
            q, k = self.q_norm(q), self.k_norm(k)
        if isinstance(self.spec.position, nodes.Rope):
            q = rope(q, self.spec.position.base, offset=pos)
            k = rope(k, self.spec.position.base, offset=pos)
        q, k = self._features(q, k)

        # (3) mixing, through the chosen path
        if self.spec.is_recurrent:
            mixed = self._recurrent_inputs(x, q, self._shared(k), self._shared(v))
            o, S = self.paths.recurrent(mixed, state.S)
            changes = dict(S=S)
        else:
            k_all = k if state.k is None else torch.cat([state.k, k], dim=1)
            v_all = v if state.v is None else torch.cat([state.v, v], dim=1)
            bias, decay_row = self._score_bias(x, state, k_all.shape[1])
            o = self.paths.attention(AttentionInputs(  # k, v as cached: Gk and K heads
                q=self._learned_q(q), k=k_all, v=v_all, pos=pos, bias=bias, alibi=getattr(self, "alibi", None)))
            changes = dict(k=k_all, v=v_all, decay_row=decay_row)

        # (4) output: norm, gate, projection
        o = self._output(o, x)
        if not keep_state:
            return o, None
        return o, replace(state, pos=pos + T, conv=conv_state, shift=shift, **changes)

    @property
    def per_position(self) -> bool:
        """True when the mixer has parameters per position (random keys, a distance table), so
        it cannot run past its context."""
        return hasattr(self, "random_keys") or hasattr(self, "distance_bias")

    def _heads(self, u: Tensor, groups: int) -> Tensor:
        """(B, T, groups*Dk) -> (B, T, H, Dk): each group's projection serves H/groups
        consecutive heads."""
        B, T, _ = u.shape
        return self._shared(u.view(B, T, groups, self.Dk))

    def _shared(self, u: Tensor) -> Tensor:
        """(B, T, groups, D) -> (B, T, H, D): a shared head serves H/groups consecutive heads."""
        return repeat_heads(u, self.H)

    def _learned_q(self, q: Tensor) -> Tensor:
        """q times the learned per-head scale / temperature (when the spec has them): the scores
        q.k scale_h / T_h, with the path's own scale and temperature at their fixed values
        (the kernel key's `scale` and `temperature` are 1 for a learned one)."""
        factor = None
        if hasattr(self, "log_scale"):
            factor = self.log_scale
        if hasattr(self, "log_temperature"):
            # the language's lower bound (nodes.MIN_TEMPERATURE) holds while it trains, not only
            # at its initial value: below it the scores only sharpen rounding noise
            log_t = self.log_temperature.clamp_min(math.log(nodes.MIN_TEMPERATURE))
            factor = -log_t if factor is None else factor - log_t
        if factor is None:
            return q
        return q * factor.exp().to(q.dtype)[:, None]  # (H, 1) over (B, T, H, F)

    def _features(self, q: Tensor, k: Tensor) -> tuple[Tensor, Tensor]:
        rel = self.spec.relation
        scale = rel.scale if isinstance(rel, nodes.Dot) else "auto"
        if isinstance(scale, nodes.Learned):
            scale = 1.0  # multiplies phi(q) . phi(k) after the feature map: `_learned_q`
        if self.feature == "identity":
            return q, k  # the path applies scale (auto: 1/sqrt(Dk)) to the scores
        if self.feature == "taylor" and scale == "auto":
            # Based: q and k scaled by Dk^(-1/4) so the expansion approximates exp(q.k/sqrt(Dk))
            q, k = q * self.Dk ** -0.25, k * self.Dk ** -0.25
        elif scale != "auto":
            q = q * scale
        return feature_map(q, self.feature), feature_map(k, self.feature)

    def _score_bias(self, x: Tensor, state: MixerState, L: int) -> tuple[Tensor | None, Tensor | None]:
        """Softmax family: the additive (B or 1, H, T, L) biases of the T new queries (positions
        pos..pos+T-1) over all L keys, from decay and positional relation, in `bias_dtype`
        (float64 stays float64, anything else is float32); and the decay's last bias row to
        carry. A decoding step builds its (1, L) row, never the (L, L) matrix."""
        dtype = bias_dtype(x.dtype)
        T = x.shape[1]
        bias, decay_row = None, None
        if hasattr(self, "distance_bias"):
            i = torch.arange(state.pos, state.pos + T, device=x.device)
            dist = (i[:, None] - torch.arange(L, device=x.device)[None, :]).clamp(min=0)
            bias = self.distance_bias[:, dist].to(dtype)  # (H, T, L)
        decay = self.spec.decay
        if not isinstance(decay, nodes.NoDecay):
            new = self._log_decay(x).to(dtype).transpose(1, 2)  # (B, H, T)
            decay_bias = segment_sums(new, state.decay_row)  # (B, H, T, L)
            decay_row = decay_bias[..., -1, :]
            bias = decay_bias if bias is None else bias + decay_bias
        return bias, decay_row

    # --- the recurrent family ------------------------------------------------------------------------

    def _log_decay(self, x: Tensor) -> Tensor | None:
        """(B, T, H) or (B, T, H, Dk) log decays, all <= 0, or None for no decay and for the
        selective step (which arrives as RecurrentInputs.dt and .rate instead)."""
        B, T, _ = x.shape
        decay = self.spec.decay
        if isinstance(decay, nodes.ConstantDecay):
            return self.const_log_decay.to(x.dtype).expand(B, T, self.H)
        if hasattr(self, "dt_proj"):
            return -torch.exp(self.A_log) * F.softplus(self.dt_proj(x))
        if hasattr(self, "decay_up"):
            gate = self.decay_up(self.decay_down(x))
            return F.logsigmoid(gate).view(B, T, self.H, self.Dk) / init.GATE_NORMALISER
        return None

    def _recurrent_inputs(self, x: Tensor, q: Tensor, k: Tensor, v: Tensor) -> RecurrentInputs:
        B, T, _ = x.shape
        log_decay = self._log_decay(x)
        if hasattr(self, "alibi"):
            # ALiBi's -m*(i-j) score penalty, in a recurrence, is an extra constant decay e^-m
            alibi = (-self.alibi).to(x.dtype).view(1, 1, self.H)
            if log_decay is None:
                log_decay = alibi.expand(B, T, self.H)
            elif log_decay.dim() == 3:
                log_decay = log_decay + alibi
            else:
                log_decay = log_decay + alibi[..., None]
        update = self.spec.update
        if isinstance(update, nodes.Delta):
            # delta rules need unit-norm keys so that (I - beta k k^T) is a contraction; q is
            # normalised too (DeltaNet's choice), and scaled after, so the scale survives
            q, k = F.normalize(q, dim=-1), F.normalize(k, dim=-1)
        q = self._learned_q(q * self.key.scale)
        mixed = RecurrentInputs(q=q, k=k, v=v, log_decay=log_decay)
        if hasattr(self, "dt_up"):  # float32 at least, whatever autocast does: the step's exp and products
            dtype = torch.promote_types(x.dtype, torch.float32)
            mixed.dt = F.softplus(self.dt_up(self.dt_down(x)).to(dtype))
            mixed.rate = -torch.exp(self.rate_log.to(dtype))
        if isinstance(update, nodes.Delta):
            mixed.beta = torch.sigmoid(self.beta_proj(x))
        elif isinstance(update, nodes.Rwkv7):
            mixed.a = torch.sigmoid(self.a_proj(x)).view(B, T, self.H, self.Dk)
            mixed.kappa = F.normalize(k, dim=-1)
        elif hasattr(self, "bonus"):
            mixed.bonus = self.bonus
        if isinstance(self.spec.weights, nodes.NormalizedLinear):
            # carry the normaliser z_t = sum_j decay * phi(k_j) as an extra value column of ones
            mixed.v = torch.cat([v, v.new_ones(B, T, self.H, 1)], dim=-1)
        return mixed

    # --- (4) output --------------------------------------------------------------------------------

    def _output(self, o: Tensor, x: Tensor) -> Tensor:
        B, T = x.shape[:2]
        if isinstance(self.spec.weights, nodes.NormalizedLinear):
            o = o[..., :-1] / (o[..., -1:] + 1e-6)  # eps: phi(q).z can be 0 for relu features
        if isinstance(self.spec.norm, nodes.RmsNorm):
            o = self.out_norm(o)
        o = o.reshape(B, T, self.H * self.Dv)
        if isinstance(self.spec.norm, nodes.GroupNorm):
            o = self.out_norm(o.reshape(B * T, -1)).view(B, T, -1)
        gate = self.spec.gate
        if isinstance(gate, nodes.SwishGate):
            o = o * F.silu(self.gate_proj(x))
        elif isinstance(gate, nodes.SigmoidGate):
            o = o * torch.sigmoid(self.gate_proj(x))
        return self.o_proj(o)


def layer_seed(seed: int, layer: int) -> int:
    """The seed of layer `layer`'s random key table: `seed` itself for layer 0 (a one-layer
    model draws what it always drew), else 32 bits of sha256(seed, layer). Not seed + layer:
    neighbouring seeds would share tables across layers; and torch's CPU generator keeps only
    the low 32 bits of a seed, so no wider combination would do."""
    if layer == 0:
        return seed
    digest = hashlib.sha256(f"random_keys:{seed}:{layer}".encode()).digest()
    return int.from_bytes(digest[:4], "little")


def segment_sums(log_decay: Tensor, previous_row: Tensor | None = None) -> Tensor:
    """The score bias of a decayed softmax, [i, j] = sum_{j < s <= i} log a_s (0 for j >= i),
    for the rows of new positions only.

    log_decay (..., T): the log decays of positions p..p+T-1. previous_row (..., p): the bias row
    of position p-1 (what the previous call returned as its last row), None when p = 0.
    Returns (..., T, p+T): rows p..p+T-1 over every key 0..p+T-1. With p = 0 that is the whole
    (L, L) bias; a decoding step (T = 1) costs one row, O(L).

    Why not cum_i - cum_j: the cumulative sums grow with L (-5 per token is -20000 at L = 4096)
    while the weights that matter have a bias of order 1, so the difference keeps only the last
    digits (a float32 cumsum lost 1e-5 of the output at L = 1024). Here every entry is summed
    from its own terms, all <= 0, starting at s = j + 1: a sum of same-sign terms has no
    cancellation, so its rounding error is at most (i - j) * eps * |entry| (recursive summation,
    Higham, Accuracy and Stability of Numerical Algorithms, §4.2), whatever the position. Row i
    is row i-1 plus log a_i on the columns j < i, the recursion of the cumsum below: a forward in
    pieces adds the same terms in the same order as one forward over everything."""
    T = log_decay.shape[-1]
    p = 0 if previous_row is None else previous_row.shape[-1]
    s = torch.arange(p, p + T, device=log_decay.device)
    later = s[:, None] > torch.arange(p + T, device=log_decay.device)[None, :]  # [s, j]: s > j
    terms = log_decay[..., :, None].expand(*log_decay.shape, p + T).masked_fill(~later, 0.0)
    if previous_row is None:
        return terms.cumsum(dim=-2)  # [i, j] = sum_{s <= i} terms[s, j]
    start = F.pad(previous_row, (0, T))[..., None, :]  # row p-1, zeros for j >= p-1
    return torch.cat([start, terms], dim=-2).cumsum(dim=-2)[..., 1:, :]
