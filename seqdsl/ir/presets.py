"""Presets: a model resized to a standard size (`tiny`, `110m`, `1.3b`), keeping its architecture.

`apply_preset(program, model, preset)` is the one place a preset is applied to a resolved model
(`build_lm(..., preset=...)`, `seqdsl lower --preset`, the test library). Everything it returns
is validated through the pydantic IR (`Model.model_validate`, `Mixer.model_validate`), so a
resized model obeys the same bounds as one written by hand; what cannot be resized raises
`PresetError` with the reason.

The rules (docs/lowering.md, "Presets"):

- **Sizes.** `d_model`, `vocab` and `context` are the preset's (`nodes.PRESET_SIZES`).
- **Layers.** The preset's layer count, doubled for a model without an MLP (mixer-only blocks, as
  Mamba's 130M and 1.3B configurations stack 24 and 48 of them where a Transformer has 12 and 24),
  then rounded *up* to a multiple of the layer pattern's period (`mixer = [a, a, b]` has period 3)
  so that every mixer of a hybrid keeps its place; the rounding is reported in `notes`.
- **Heads scale with the width.** A mixer's inner width W = H x Dv is scaled by the ratio of the
  new d_model to the old one. `head_dim` is kept when it divides the new W (heads change instead);
  otherwise it is halved until it does (an explicit `key_dim` is halved with it, keeping their
  ratio), and the preset refuses when halving cannot reach a divisor. `expand` is kept, so
  `heads = auto` stays auto. Explicit `qk_groups` / `kv_groups` keep the number of heads per group
  (1 group stays 1 group: Mamba's shared B/C, multi-query attention); when that does not divide
  the new head count, the largest group count that does and shares no fewer heads per group is
  taken (one group when there are fewer heads than one group had) and reported. Every other slot
  (learned values included) is kept as written.
- **Names.** The model is named for its size: a trailing size (`_110m`, `_tiny`, `_1_3b`) is
  replaced by the preset's.

This module imports neither torch nor triton.
"""

from __future__ import annotations

import re
from dataclasses import dataclass

import pydantic

from seqdsl.errors import SeqError, one_of
from seqdsl.ir import nodes
from seqdsl.ir.conflicts import conflicts
from seqdsl.ir.layout import LayoutError, head_layout


class PresetError(SeqError):
    """A model that cannot be resized to the preset; the message says why."""


@dataclass(frozen=True)
class Resized:
    """A model at a preset's size: the program holding it (its mixers resized, other models of
    the file left out) and what the resizing changed, in words."""

    program: nodes.Program
    model: nodes.Model
    notes: tuple[str, ...]


# What `seqdsl lower` and `seqdsl check` both say of a file that declares nothing to build.
NOTHING_DECLARED = "the spec declares no mixer and no model"

_SIZE_SUFFIX = re.compile(r"_(tiny|\d+(_\d+)?[kmbt])$", re.IGNORECASE)


def preset_name(name: str, preset: str) -> str:
    """`transformer_110m` at `tiny` -> `transformer_tiny`; `1.3b` is written `1_3b`."""
    return f"{_SIZE_SUFFIX.sub('', name)}_{preset.replace('.', '_')}"


def preset_layers(model: nodes.Model, preset: str) -> tuple[int, list[str]]:
    """The layer count at `preset` (see the module docstring) and a note for each adjustment."""
    layers = int(nodes.PRESET_SIZES[preset]["layers"])
    notes = []
    if isinstance(model.mlp, nodes.NoMlp):
        notes.append(f"layers {layers} -> {2 * layers}: mixer-only blocks (mlp = none) come two per "
                     "Transformer block, as in Mamba's configurations")
        layers *= 2
    period = len(model.mixer)
    if layers % period:
        rounded = layers + period - layers % period
        pattern = "[" + ", ".join(model.mixer) + "]"
        notes.append(f"layers {layers} -> {rounded}: a multiple of the {period}-layer pattern {pattern}, "
                     "so every mixer keeps its place")
        layers = rounded
    return layers, notes


def _groups(explicit: int | str, heads_before: int, heads_after: int) -> int | str:
    """qk_groups / kv_groups at the new head count: the same heads per group when that divides
    the new count, else the most groups that divide it with no fewer heads each (at least 1)."""
    if explicit == "auto" or explicit == 1:  # one shared group stays one (Mamba's B/C, MQA)
        return explicit
    per_group = heads_before // explicit
    fitting = [g for g in range(1, heads_after + 1) if heads_after % g == 0 and heads_after // g >= per_group]
    return max(fitting, default=1)


def resize_mixer(mixer: nodes.Mixer, d_from: int, d_to: int) -> tuple[nodes.Mixer, list[str]]:
    """`mixer`, written for a model of width `d_from`, at width `d_to` (module docstring rules)."""
    try:
        src = head_layout(mixer, d_from)
    except LayoutError as err:
        raise PresetError(f"cannot resize mixer `{mixer.name}`: {err}", hint=err.fix) from None
    width_from = src.heads * src.head_dim
    width_to = max(1, round(width_from * d_to / d_from))
    head_dim, halvings = src.head_dim, 0
    while width_to % head_dim:
        if head_dim % 2:
            raise PresetError(
                f"cannot resize mixer `{mixer.name}` to d_model {d_to}: its {src.heads} heads of "
                f"{src.head_dim} ({width_from} wide at d_model {d_from}) scale to {width_to}, and no "
                f"halving of head_dim {src.head_dim} divides {width_to}",
                hint="give the mixer a power-of-two head_dim, or resize the model by hand")
        head_dim //= 2
        halvings += 1
    heads = width_to // head_dim
    update: dict[str, object] = {"head_dim": head_dim}
    if mixer.heads != "auto":
        update["heads"] = heads
    if mixer.key_dim != "auto" and halvings:
        if mixer.key_dim % 2 ** halvings:
            raise PresetError(
                f"cannot resize mixer `{mixer.name}` to d_model {d_to}: head_dim {src.head_dim} -> "
                f"{head_dim} would take key_dim {mixer.key_dim} to a fraction",
                hint="a key_dim divisible by the same power of two, or resize the model by hand")
        update["key_dim"] = mixer.key_dim >> halvings
    update["qk_groups"] = _groups(mixer.qk_groups, src.heads, heads)
    update["kv_groups"] = _groups(mixer.kv_groups, src.heads, heads)
    try:
        resized = nodes.Mixer.model_validate({**mixer.model_dump(), **update})
        layout = head_layout(resized, d_to)
    except (pydantic.ValidationError, LayoutError) as err:
        raise PresetError(f"cannot resize mixer `{mixer.name}` to d_model {d_to}: {err}") from None
    new_conflicts = {c.message for c in conflicts(resized)} - {c.message for c in conflicts(mixer)}
    if new_conflicts:
        raise PresetError(f"cannot resize mixer `{mixer.name}` to d_model {d_to}: "
                          + "; ".join(sorted(new_conflicts)))
    notes = []
    if (layout.heads, layout.head_dim, layout.key_dim) != (src.heads, src.head_dim, src.key_dim):
        keys = f", key_dim {src.key_dim} -> {layout.key_dim}" if layout.key_dim != src.key_dim else ""
        notes.append(f"mixer {mixer.name}: {_heads(src.heads)} of {src.head_dim} -> {_heads(layout.heads)} of "
                     f"{layout.head_dim}{keys} (inner width {width_from} -> {width_to})")
    for what, before, after in (("qk_groups", src.qk_groups, layout.qk_groups),
                                ("kv_groups", src.kv_groups, layout.kv_groups)):
        if getattr(mixer, what) not in ("auto", 1) and (src.heads // before) != (layout.heads // after):
            notes.append(f"mixer {mixer.name}: {what} {before} -> {after} ({src.heads // before} -> "
                         f"{layout.heads // after} heads per group: the nearest that divides {layout.heads})")
    return resized, notes


def _heads(n: int) -> str:
    return f"{n} head" + ("s" if n != 1 else "")


def apply_preset(program: nodes.Program, model: nodes.Model, preset: str) -> Resized:
    """`model` (of `program`) at the size of `preset`; PresetError if it cannot be resized."""
    if preset not in nodes.PRESET_SIZES:
        raise PresetError(f"unknown preset {preset!r}", hint=f"presets are {one_of(nodes.PRESETS)}")
    sizes = nodes.PRESET_SIZES[preset]
    layers, notes = preset_layers(model, preset)
    d_to = int(sizes["d_model"])
    mixers = {}
    for name in dict.fromkeys(model.mixer):
        mixers[name], changed = resize_mixer(program.mixer(name), model.d_model, d_to)
        notes.extend(changed)
    try:
        resized = nodes.Model.model_validate({**model.model_dump(), **sizes, "layers": layers,
                                              "name": preset_name(model.name, preset)})
    except pydantic.ValidationError as err:
        raise PresetError(f"cannot resize model `{model.name}` to preset {preset}: {err}") from None
    own = tuple(resized.name if n == model.name else n for n in program.own)
    return Resized(
        program=nodes.Program(mixers=tuple(mixers.get(m.name, m) for m in program.mixers),
                              models=(resized,), own=own),
        model=resized, notes=tuple(notes))


def model_at(program: nodes.Program, name: str | None = None, preset: str | None = None) -> Resized:
    """The model to build from `program`, resized to `preset` when one is given.

    Which model: `name`; else the file's last declared model; else, for a file of mixers only, a
    model around its last declared mixer, written at the `110m` width the library's mixers are
    designed for and resized to `preset` (default `tiny`), so explicit heads shrink with it."""
    if name is not None:
        try:
            model = program.model(name)
        except KeyError:
            names = ", ".join(m.name for m in program.models) or "none"
            raise SeqError(f"no model `{name}` in this spec (models: {names})") from None
    else:
        own_models = [m for m in program.models if m.name in program.own]
        if own_models:
            model = own_models[-1]
        else:
            own_mixers = [m for m in program.mixers if m.name in program.own] or list(program.mixers)
            if not own_mixers:
                raise SeqError(NOTHING_DECLARED,
                               hint="declare a `mixer NAME { ... }` (see grammar/README.md)")
            mixer = own_mixers[-1].name
            model = nodes.Model(name=f"{mixer}_110m", mixer=(mixer,), **nodes.PRESET_SIZES["110m"])
            preset = preset or "tiny"
    if preset is None:
        return Resized(program, model, ())
    return apply_preset(program, model, preset)
