"""Lower a resolved `Mixer` to a `torch.nn.Module`.

`MixerModule(mixer, d_model)` computes the mixer's `MixerPlan` once (seqdsl/ir/plan.py) and makes
one stage per plan record (seqdsl/lower/stages.py); `forward(x, state)` runs them in order:

    (1) inputs      token shift / causal conv, projections to q, k, v per head
    (2) relation    keys from content (dot), frozen random, constant, or none (positional);
                    qk-norm, position (rope on q and k; alibi as a score bias for softmax, as
                    extra per-head log decay for the recurrent family), feature map
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

from dataclasses import replace

import torch
from torch import Tensor, nn

from seqdsl.errors import SeqError
from seqdsl.ir import nodes
from seqdsl.ir.conflicts import conflicts
from seqdsl.ir.key import dense_at
from seqdsl.ir.layout import LayoutError
from seqdsl.ir.plan import MixerPlan, mixer_plan
from seqdsl.lower.conv_path import ConvPath
from seqdsl.lower.paths import PathChooser
from seqdsl.lower.stages import (
    FRESH, AttentionMixing, InputStage, MixerState, OutputStage, RecurrentMixing, RelationStage)


class LoweringError(SeqError):
    """A spec that parses and type-checks but has no PyTorch meaning."""


class MixerModule(nn.Module):
    """`layer` (0-based) and `n_layers` place the mixer in its model: per-layer initialisations
    (RWKV's decay speeds) and per-layer random key tables depend on them."""

    def __init__(self, mixer: nodes.Mixer, d_model: int, *, context: int = 2048, layer: int = 0,
                 n_layers: int = 1):
        super().__init__()
        if not 0 <= layer < n_layers:
            raise ValueError(f"layer {layer} is not in a model of {n_layers} layers")
        self.spec, self.d_model, self.context = mixer, d_model, context
        self.layer, self.n_layers = layer, n_layers
        self.plan = plan = _plan(mixer, d_model)
        self.key = plan.key  # what stage (3) is specialised on: paths plan from this
        lay = plan.layout
        inputs, relation, mixing, output = plan.stages
        # the stages register their parameters here, in the order of the stages (checkpoints and
        # the seed-0 initialisation depend on it: tests/lower/test_lowering_unchanged.py)
        self.inputs = InputStage(inputs, lay, self, name=mixer.name)
        self.relation = RelationStage(relation, lay, self, context=context, layer=layer)
        family = AttentionMixing if plan.key.family in ("softmax", "select") else RecurrentMixing
        self.mixing = family(mixing, lay, self)
        self.output = OutputStage(output, lay, self)
        self.paths = PathChooser(self.key, mixer.name, dense=dense_at(self.key, context))
        self.conv_path = self.inputs.conv_path  # stage (1)'s causal conv, planned like stage (3)
        self.reset_mixing_parameters()

    @torch.no_grad()
    def reset_mixing_parameters(self) -> None:
        """The initialisation of the decay, gate, bonus and token-shift parameters that this
        mixer's family's reference implementation uses (`MixerPlan.init`, seqdsl/lower/init.py;
        docs/lowering.md, "Initialisation"). Called at construction, and by the LM after its
        N(0, 0.02) init of every Linear, which would otherwise overwrite the biases that carry
        these recipes."""
        if self.get_submodule(self.plan.output.proj.name).get_parameter("weight").is_meta:
            return  # a model built on the meta device (sizes only) has no values to set
        for stage in (self.inputs, self.mixing, self.output):
            stage.reset(self, self.plan.init, self.layer, self.n_layers)

    def forward(self, x: Tensor, state: MixerState | None = None, *,
                keep_state: bool = True) -> tuple[Tensor, MixerState | None]:
        """(output, the state after x). keep_state=False (a training step from position 0) builds
        no state and returns None for it: nothing reads it, and a dataclass built inside a
        `torch.compile`d region breaks the graph on some PyTorch versions (2.11)."""
        state = state if state is not None else FRESH
        T = x.shape[1]
        if state.pos + T > self.context and self.per_position:
            raise LoweringError(f"mixer `{self.spec.name}` has per-position parameters for "
                                f"{self.context} tokens; got position {state.pos + T}")
        projected = self.inputs(self, x, state)
        q, k = self.relation(self, x, projected, state.pos)
        o, changes = self.mixing(self, self.paths, x, q, k, projected.v, state)
        o = self.output(self, o, x)
        if not keep_state:
            return o, None
        return o, replace(state, pos=state.pos + T, conv=projected.conv, shift=projected.shift, **changes)

    def path_choosers(self) -> list[PathChooser | ConvPath]:
        """What plans this mixer's paths: stage (3)'s chooser and, with a conv, stage (1)'s."""
        return [self.paths] + ([self.conv_path] if self.conv_path is not None else [])

    @property
    def per_position(self) -> bool:
        """True when the mixer has parameters per position (random keys, a distance table), so
        it cannot run past its context."""
        return self.plan.per_position


def _plan(mixer: nodes.Mixer, d_model: int) -> MixerPlan:
    """The mixer's plan, or a LoweringError saying why it cannot be built."""
    problems = [c.message for c in conflicts(mixer)]
    if problems:
        raise LoweringError(f"mixer `{mixer.name}` cannot be lowered: " + "; ".join(problems),
                            hint="`seqdsl check` reports these as W001 with their places")
    try:
        return mixer_plan(mixer, d_model)
    except LayoutError as err:
        raise LoweringError(str(err), hint=err.fix) from None
