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

Running past the model's `context` (docs/lowering.md, "Context"): mixers whose parameters are
per position (`random_keys`, `positional`) have none beyond it and refuse with a LoweringError;
every other mixer (RoPE, ALiBi, no position, the recurrent family) runs on, as evaluation at longer
contexts than the training one needs.
"""

from __future__ import annotations

import logging
import math
from collections.abc import Callable
from typing import cast
from dataclasses import dataclass

import torch
import torch.nn.functional as F
from torch import Tensor, nn

from seqdsl.ir import nodes
from seqdsl.ir.plan import swiglu_hidden
from seqdsl.ir.presets import model_at
from seqdsl.lower.mixer import LoweringError, MixerModule
from seqdsl.lower.stages import FRESH, MixerState

log = logging.getLogger("seqdsl")


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
    mixer: MixerState = FRESH
    shift: Tensor | None = None  # rwkv7 channel-mix token shift


# The state of a block before its first token. A module-level instance, not one built per call:
# dynamo cannot build this dataclass inside a traced loop (a graph break that sends the whole
# compiled training step back to eager), but it can read a global.
_FRESH = BlockState()


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

    def forward(self, x: Tensor, state: BlockState, *, keep_state: bool = True) -> tuple[Tensor, BlockState | None]:
        """(output, state after x); keep_state=False builds no state (MixerModule.forward)."""
        y, mixer_state = self.mixer(self.norm1(x), state.mixer, keep_state=keep_state)
        x = x + y
        shift = None
        if isinstance(self.mlp, SwiGLU):
            x = x + self.mlp(self.norm2(x))
        elif isinstance(self.mlp, ChannelMix):
            y, shift = self.mlp(self.norm2(x), state.shift)
            x = x + y
        if not keep_state:
            return x, None
        return x, BlockState(mixer_state, shift)


def block_hidden(block: nn.Module, x: Tensor) -> Tensor:
    """One block of `LanguageModel.training_hidden`: (B, T, D) -> (B, T, D), no state."""
    return block(x, _FRESH, keep_state=False)[0]


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

    def mixers(self) -> list[MixerModule]:
        """Each layer's mixer, in order."""
        return [cast(Block, block).mixer for block in self.blocks]

    def positions_limit(self) -> int | None:
        """How many positions the model can run (its context) when a mixer has per-position
        parameters, else None (no limit)."""
        bounded = any(m.per_position for m in self.mixers())
        return self.spec.context if bounded else None

    def forward(self, tokens: Tensor, state: list[BlockState] | None = None) -> tuple[Tensor, list[BlockState]]:
        if tokens.dim() != 2:
            raise LoweringError(f"tokens must be (batch, time), got shape {tuple(tokens.shape)}")
        if tokens.device.type == "cpu":  # on an accelerator the check would cost a sync every step
            self.check_tokens(tokens)
        state = state or [BlockState() for _ in self.blocks]
        limit = self.positions_limit()
        end = state[0].mixer.pos + tokens.shape[1]
        if limit is not None and end > limit:
            names = sorted({m.spec.name for m in self.mixers() if m.per_position})
            raise LoweringError(
                f"model {self.spec.name} has per-position parameters for its {limit}-token context "
                f"(mixer {', '.join(names)}); position {end} is past it",
                hint="feed at most `context` tokens; RoPE, ALiBi, no-position and recurrent mixers "
                     "may run past the context (docs/lowering.md, Context)")
        x = self.embed(tokens)
        new_state = []
        for block, s in zip(self.blocks, state):
            x, s = block(x, s)
            new_state.append(s)
        return self.logits(x), new_state

    def training_hidden(self, tokens: Tensor, run_block: Callable[[nn.Module, Tensor], Tensor] | None = None) -> Tensor:
        """(B, T, D) output of the last block for whole sequences from position 0, no state
        carried in or out: the body of the forward training runs, written as one plain function so
        `torch.compile` can trace it as one graph (compile_scope "model", seqdsl/train/step.py). `logits` of it equal
        forward(tokens)[0], without forward's checks. `run_block(block, x)`, when given, runs each
        block instead (`block_hidden` compiled once for every block: step.py)."""
        x = self.embed(tokens)
        for block in self.blocks:
            x = block_hidden(block, x) if run_block is None else run_block(block, x)
        return x

    def logits(self, hidden: Tensor) -> Tensor:
        """(B, T, V) from the last block's output (B, T, D): final norm, then the head."""
        return self.head(self.norm(hidden))

    def loss(self, tokens: Tensor, targets: Tensor) -> Tensor:
        logits, _ = self(tokens)
        return F.cross_entropy(logits.float().flatten(0, 1), targets.flatten())

    def check_tokens(self, tokens: Tensor) -> None:
        """LoweringError unless `tokens` are integer ids inside the vocabulary."""
        if tokens.dtype.is_floating_point or tokens.dtype == torch.bool or tokens.is_complex():
            raise LoweringError(f"tokens must be integer ids, got {tokens.dtype}")
        if tokens.numel():
            low, high = int(tokens.min()), int(tokens.max())
            if low < 0 or high >= self.spec.vocab:
                bad = low if low < 0 else high
                raise LoweringError(f"token id {bad} is outside the vocabulary of model {self.spec.name} "
                                    f"(ids 0 to {self.spec.vocab - 1})")

    @torch.no_grad()
    def generate(self, prompt: Tensor, steps: int, *, temperature: float = 0.0,
                 generator: torch.Generator | None = None) -> Tensor:
        """Continue `prompt` (B, T) by `steps` tokens, one forward per token on the carried
        state: greedy when temperature = 0, else sampled from softmax(logits / temperature).
        LoweringError for an empty prompt, ids outside the vocabulary, a negative temperature or
        step count, and (for mixers with per-position parameters) a total length past the
        model's context."""
        if prompt.dim() != 2 or prompt.shape[1] == 0:
            raise LoweringError(f"generate needs a (batch, time) prompt of at least one token, got shape "
                                f"{tuple(prompt.shape)}", hint="start from a token, e.g. a newline")
        if not math.isfinite(temperature) or temperature < 0:
            raise LoweringError(f"generate's temperature must be 0 (greedy) or positive, got {temperature}")
        if steps < 0:
            raise LoweringError(f"generate's steps must be 0 or more, got {steps}")
        self.check_tokens(prompt)
        limit = self.positions_limit()
        if limit is not None and prompt.shape[1] + steps > limit:
            raise LoweringError(f"model {self.spec.name} can hold {limit} tokens (per-position "
                                f"parameters); the prompt of {prompt.shape[1]} plus {steps} steps is "
                                f"{prompt.shape[1] + steps}", hint="generate fewer steps or shorten the prompt")
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

    @torch.no_grad()
    def plan_paths(self, device: torch.device | str, autocast_dtype: torch.dtype | None = None) -> None:
        """Plan every mixer's path for `device` with one eager two-token forward (under autocast to
        `autocast_dtype` when given, as training runs), so that a `torch.compile`d forward finds its
        plans made: planning runs self-checks, times kernels and logs, which cannot be traced
        (a compiled call with no plan raises). Zeros as tokens: no random number is drawn. The
        forward's mixers run the reference once planned (`PathChooser.planning_only`): a fast
        kernel would be compiled, and a library's autotuned, for two tokens, a shape training
        never runs, on the way to its first step."""
        device = torch.device(device)
        tokens = torch.zeros(1, 2, dtype=torch.long, device=device)
        choosers = [chooser for mixer in self.mixers() for chooser in mixer.path_choosers()]
        for chooser in choosers:
            chooser.planning_only = True
        try:
            with torch.no_grad(), torch.autocast(device.type, dtype=autocast_dtype, enabled=autocast_dtype is not None):
                self(tokens)
        finally:
            for chooser in choosers:
                chooser.planning_only = False

    def describe_paths(self, device: torch.device | str) -> list[tuple[int, str, str, str]]:
        """[(layer, mixer name, path, reason)] this model takes on `device`: the plan its calls
        took when it has run there (after self-checks, for the dtype it ran in), else the plan
        the static facts give (`seqdsl lower`, before any call)."""
        device = torch.device(device)
        rows = []
        for i, mixer in enumerate(self.mixers()):
            plan = mixer.paths.chosen.get(device.type) or mixer.paths.plan(device)
            reason = plan.reason
            if mixer.conv_path is not None:
                conv = mixer.conv_path.chosen.get(device.type) or mixer.conv_path.plan(device)
                reason += f"; causal conv: {conv.op} ({conv.reason})"
            rows.append((i, mixer.spec.name, plan.op, reason))
        return rows


def layer_ranges(layers: list[int]) -> str:
    """`0-11` for consecutive layers, else `0,2,4`."""
    if len(layers) > 1 and layers == list(range(layers[0], layers[-1] + 1)):
        return f"{layers[0]}-{layers[-1]}"
    return ",".join(map(str, layers))


def path_lines(rows: list[tuple[int, str, str, str]]) -> list[str]:
    """`describe_paths` rows as `layers 0-11  mixer: path (reason)`, one line per group of layers
    that share mixer, path and reason (what `seqdsl lower` prints and a training run logs)."""
    groups: dict[tuple[str, str, str], list[int]] = {}
    for layer, mixer, path, why in rows:
        groups.setdefault((mixer, path, why), []).append(layer)
    width = max((len(layer_ranges(layers)) for layers in groups.values()), default=0)
    return [f"layers {layer_ranges(layers):<{width}}  {mixer}: {path} ({why})"
            for (mixer, path, why), layers in groups.items()]


def _init(module: nn.Module) -> None:
    # GPT-2 style: N(0, 0.02) for projections and embeddings
    if isinstance(module, (nn.Linear, nn.Embedding)):
        nn.init.normal_(module.weight, std=0.02)
        if isinstance(module, nn.Linear) and module.bias is not None:
            nn.init.zeros_(module.bias)
    elif isinstance(module, MixerModule):
        # apply() visits children first: the mixer's Linears just got the lines above, which
        # zero the biases its family's initialisation lives in; put that back
        module.reset_mixing_parameters()


def build_lm(program: nodes.Program, model: str | None = None, *, preset: str | None = None,
             keep_absolute: bool = False) -> LanguageModel:
    """The LM of `model` (default: the file's last declared model, or a `tiny` model around its
    last declared mixer when it declares none), resized to `preset` when one is given
    (`seqdsl.ir.presets`: heads scale with the width, windows and chunks with the context unless
    `keep_absolute`, a hybrid keeps its layer pattern). What the resize could not keep is
    logged as a warning (logger "seqdsl"), its changes as infos."""
    resized = model_at(program, model, preset, keep_absolute=keep_absolute)
    for note in resized.notes:
        log.info("preset %s: %s", resized.preset, note)
    for note in resized.not_kept:
        log.warning("preset %s, not kept: %s", resized.preset, note)
    return LanguageModel(resized.program, resized.model)
