"""The language model around the spec's mixers.

Shape legend: B batch, T tokens, D d_model, V vocab.

Two block layouts:
    transformer   Transformer++ pre-norm block: x += mixer(rmsnorm(x)); x += swiglu(rmsnorm(x))
    rwkv7         RWKV-7's layout: x += mixer(layernorm(x)); x += channel_mix(layernorm(x)), where
                  channel_mix is RWKV's token-shifted squared-ReLU MLP. The paper transplants the
                  Top-1 mixers into these blocks.
Embeddings are tied to the output head when the model says `tie = true`.

`LanguageModel.forward(tokens, state)` returns (logits, state): pass the state back to continue
token by token (`generate`). Decoding step by step equals the full forward (tested).
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import torch
import torch.nn.functional as F
from torch import Tensor, nn

from seqdsl.ir import nodes
from seqdsl.lower.mixer import LoweringError, MixerModule, MixerState


def swiglu_hidden(mlp: nodes.SwiGLU, d_model: int) -> int:
    """`swiglu(auto)`: 8/3 d_model rounded up to a multiple of 64 (LLaMA's rule)."""
    if mlp.hidden != "auto":
        return mlp.hidden
    return 64 * math.ceil(8 * d_model / 3 / 64)


class SwiGLU(nn.Module):
    def __init__(self, d_model: int, hidden: int):
        super().__init__()
        self.gate_up = nn.Linear(d_model, 2 * hidden, bias=False)
        self.down = nn.Linear(hidden, d_model, bias=False)

    def forward(self, x: Tensor) -> Tensor:
        gate, up = self.gate_up(x).chunk(2, dim=-1)
        return self.down(F.silu(gate) * up)


class ChannelMix(nn.Module):
    """RWKV's channel mix: k = relu(W_k lerp(x, x_prev, mu))^2, out = W_v k."""

    def __init__(self, d_model: int, hidden: int):
        super().__init__()
        self.mu = nn.Parameter(torch.full((d_model,), 0.5))
        self.key = nn.Linear(d_model, hidden, bias=False)
        self.value = nn.Linear(hidden, d_model, bias=False)

    def forward(self, x: Tensor, prev: Tensor | None) -> tuple[Tensor, Tensor]:
        prev = prev if prev is not None else torch.zeros_like(x[:, 0])
        x_prev = torch.cat([prev[:, None], x[:, :-1]], dim=1)
        k = torch.relu(self.key(x + (x_prev - x) * self.mu)).square()
        return self.value(k), x[:, -1]


@dataclass(frozen=True)
class BlockState:
    mixer: MixerState = MixerState()
    shift: Tensor | None = None  # rwkv7 channel-mix token shift


class Block(nn.Module):
    def __init__(self, mixer: nodes.Mixer, model: nodes.Model, layer: int = 0):
        super().__init__()
        d = model.d_model
        self.layout = model.block
        norm = (lambda: nn.RMSNorm(d)) if self.layout == "transformer" else (lambda: nn.LayerNorm(d))
        self.norm1 = norm()
        self.mixer = MixerModule(mixer, d, context=model.context, layer=layer, n_layers=model.layers)
        self.mlp: nn.Module | None = None
        if isinstance(model.mlp, nodes.SwiGLU):
            self.norm2 = norm()
            hidden = swiglu_hidden(model.mlp, d)
            self.mlp = SwiGLU(d, hidden) if self.layout == "transformer" else ChannelMix(d, hidden)

    def forward(self, x: Tensor, state: BlockState) -> tuple[Tensor, BlockState]:
        y, mixer_state = self.mixer(self.norm1(x), state.mixer)
        x = x + y
        shift = None
        if isinstance(self.mlp, SwiGLU):
            x = x + self.mlp(self.norm2(x))
        elif isinstance(self.mlp, ChannelMix):
            y, shift = self.mlp(self.norm2(x), state.shift)
            x = x + y
        return x, BlockState(mixer_state, shift)


class LanguageModel(nn.Module):
    def __init__(self, program: nodes.Program, model: nodes.Model):
        super().__init__()
        self.spec = model
        self.embed = nn.Embedding(model.vocab, model.d_model)
        self.blocks = nn.ModuleList(
            Block(program.mixer(model.mixer[i % len(model.mixer)]), model, i) for i in range(model.layers)
        )
        self.norm = nn.RMSNorm(model.d_model) if model.block == "transformer" else nn.LayerNorm(model.d_model)
        self.head = nn.Linear(model.d_model, model.vocab, bias=False)
        self.apply(_init)
        if model.tie:
            self.head.weight = self.embed.weight

    def num_parameters(self, *, exclude_embedding: bool = False) -> int:
        seen, total = set(), 0
        for p in self.parameters():
            if id(p) not in seen:
                seen.add(id(p))
                total += p.numel()
        if exclude_embedding:
            total -= self.embed.weight.numel()
        return total

    def forward(self, tokens: Tensor, state: list[BlockState] | None = None) -> tuple[Tensor, list[BlockState]]:
        if tokens.dim() != 2:
            raise LoweringError(f"tokens must be (batch, time), got shape {tuple(tokens.shape)}")
        state = state or [BlockState() for _ in self.blocks]
        x = self.embed(tokens)
        new_state = []
        for block, s in zip(self.blocks, state):
            x, s = block(x, s)
            new_state.append(s)
        return self.head(self.norm(x)), new_state

    def loss(self, tokens: Tensor, targets: Tensor) -> Tensor:
        logits, _ = self(tokens)
        return F.cross_entropy(logits.float().flatten(0, 1), targets.flatten())

    @torch.no_grad()
    def generate(self, prompt: Tensor, steps: int, *, temperature: float = 0.0,
                 generator: torch.Generator | None = None) -> Tensor:
        """Continue `prompt` (B, T) by `steps` tokens, one forward per token on the carried
        state (greedy when temperature = 0)."""
        logits, state = self(prompt)
        out = [prompt]
        for _ in range(steps):
            last = logits[:, -1].float()
            if temperature > 0:
                nxt = torch.multinomial(torch.softmax(last / temperature, -1), 1, generator=generator)
            else:
                nxt = last.argmax(-1, keepdim=True)
            out.append(nxt)
            logits, state = self(nxt, state)
        return torch.cat(out, dim=1)

    def describe_paths(self, device: torch.device | str) -> list[tuple[int, str, str, str]]:
        """[(layer, mixer name, path, reason)] this model takes on `device`."""
        rows = []
        for i, block in enumerate(self.blocks):
            path, why = block.mixer.paths.plan(device)
            rows.append((i, block.mixer.spec.name, path, why))
        return rows


def _init(module: nn.Module) -> None:
    # GPT-2 style: N(0, 0.02) for projections and embeddings
    if isinstance(module, (nn.Linear, nn.Embedding)):
        nn.init.normal_(module.weight, std=0.02)
        if getattr(module, "bias", None) is not None:
            nn.init.zeros_(module.bias)
    elif isinstance(module, MixerModule):
        # apply() visits children first: the mixer's Linears just got the lines above, which
        # zero the biases its family's initialisation lives in; put that back
        module.reset_mixing_parameters()


def with_preset(model: nodes.Model, preset: str) -> nodes.Model:
    """The model at a preset's size (tiny/110m/1.3b), keeping its mixers, MLP and block."""
    if preset not in nodes.PRESET_SIZES:
        raise LoweringError(f"unknown preset {preset!r}; presets are {', '.join(nodes.PRESETS)}")
    return model.model_copy(update=nodes.PRESET_SIZES[preset])


def build_lm(program: nodes.Program, model: str | None = None, *, preset: str | None = None) -> LanguageModel:
    """The LM of `model` (default: the file's last declared model, or a `tiny` model around its
    last declared mixer when it declares none)."""
    spec = pick_model(program, model)
    if preset is not None:
        spec = with_preset(spec, preset)
    return LanguageModel(program, spec)


def pick_model(program: nodes.Program, name: str | None = None) -> nodes.Model:
    if name is not None:
        try:
            return program.model(name)
        except KeyError:
            names = ", ".join(m.name for m in program.models) or "none"
            raise LoweringError(f"no model `{name}` in this spec (models: {names})") from None
    own_models = [m for m in program.models if m.name in program.own]
    if own_models:
        return own_models[-1]
    own_mixers = [m for m in program.mixers if m.name in program.own] or list(program.mixers)
    if not own_mixers:
        raise LoweringError("the spec declares no mixer and no model")
    mixer = own_mixers[-1].name
    return nodes.Model(name=f"{mixer}_tiny", mixer=(mixer,), **nodes.PRESET_SIZES["tiny"])
