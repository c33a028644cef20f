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
  `heads = auto` stays auto.
- **Groups keep their ratio.** Explicit `qk_groups` / `kv_groups` keep the number of heads per
  group (GQA's query heads per key/value head); 1 group stays 1 group (Mamba's shared B/C,
  multi-query attention). When that ratio does not divide the new head count, `head_dim` is
  halved further (not below `GROUP_MIN_HEAD_DIM`) until it does; when no halving can, the
  largest group count that divides the heads and shares no fewer heads per group is taken (one
  group when there are fewer heads than one group had), and reported as not kept.
- **Windows and chunks scale with the context.** `window(w)`, `chunk_local(c)` and selection's
  `chunk(c)` keep their ratio to the context (`window(256)` at 2048 is `window(32)` at 256),
  rounded to the nearest whole size (an inexact ratio is reported as not kept); with
  `keep_absolute` they keep their size in tokens. `top(k)`'s k and a window's `sink` are counts
  and are kept. A mixer
  that becomes dense attention at the new context, or stops being it (`seqdsl.ir.key.dense_at`:
  a window, chunk or top-k covering the context), is reported as not kept.
- Every other slot (learned values, decays, conv widths included) is kept as written.
- **Names.** The model is named for its size: a trailing size (`_110m`, `_tiny`, `_1_3b`) is
  replaced by the preset's.

`Resized.notes` says what the rules changed, `Resized.not_kept` what they could not keep; the
callers print both (`seqdsl lower`, `seqdsl train`) with the resized model's verdict
(`seqdsl.check.resized`).

This module imports neither torch nor triton.
"""

from __future__ import annotations

import re
from dataclasses import dataclass

import pydantic

from seqdsl.errors import SeqError, one_of
from seqdsl.ir import nodes
from seqdsl.ir.conflicts import conflicts
from seqdsl.ir.key import dense_at
from seqdsl.ir.layout import HeadLayout, LayoutError, head_layout
from seqdsl.ir.plan import mixer_plan


class PresetError(SeqError):
    """A model that cannot be resized to the preset; the message says why, `mixer` which mixer
    (when one is the cause), so that the checker can point at it."""

    def __init__(self, message: str, *, hint: str | None = None, mixer: str | None = None):
        super().__init__(message, hint=hint)
        self.mixer = mixer


@dataclass(frozen=True)
class Resized:
    """A model at a preset's size: the program holding it (its mixers resized, other models of
    the file left out), what the resizing changed (`notes`) and what it could not keep
    (`not_kept`: the architecture differs from the one written), in words. `source` is the
    model as written (for a file of mixers only, the 110m model built around its last mixer)."""

    program: nodes.Program
    model: nodes.Model
    notes: tuple[str, ...]
    not_kept: tuple[str, ...] = ()
    source: nodes.Model | None = None
    preset: str | None = None


# What `seqdsl lower` and `seqdsl check` both say of a file that declares nothing to build.
NOTHING_DECLARED = "the spec declares no mixer and no model"

# `_110m`, `_1_3b` (one decimal digit: `window_256_110m` is window_256 at 110m, not a size `256_110m`)
_SIZE_SUFFIX = re.compile(r"_(tiny|\d+(_\d)?[kmbt])$", re.IGNORECASE)


def preset_name(name: str, preset: str) -> str:
    """`transformer_110m` at `tiny` -> `transformer_tiny`; `1.3b` is written `1_3b`."""
    return f"{_SIZE_SUFFIX.sub('', name)}_{preset.replace('.', '_')}"


def _preset_sizes(preset: str) -> nodes.PresetSizes:
    """`nodes.PRESET_SIZES[preset]` (KeyError for an unknown preset) as a fresh dict."""
    return nodes.PRESET_SIZES[preset].copy()


def preset_layers(model: nodes.Model, preset: str) -> tuple[int, list[str]]:
    """The layer count at `preset` (see the module docstring) and a note for each adjustment."""
    layers = _preset_sizes(preset)["layers"]
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


# Halving head_dim to keep a group ratio stops here: the fast kernels' narrowest tile
# (seqdsl/ir/support.py: FLA_MIN_DIM, the smallest of TRITON_HEAD_DIMS).
GROUP_MIN_HEAD_DIM = 16

_PER_GROUP = {"qk_groups": "heads per query/key group", "kv_groups": "query heads per key/value head"}


def _fallback_groups(per_group: int, heads_after: int) -> int:
    """The most groups that divide `heads_after` with no fewer than `per_group` heads each (1
    when there are fewer heads than one group had)."""
    fitting = [g for g in range(1, heads_after + 1) if heads_after % g == 0 and heads_after // g >= per_group]
    return max(fitting, default=1)


def _grouped(mixer: nodes.Mixer) -> str | None:
    """The slot whose heads-per-group ratio the resize keeps: an explicit qk_groups or kv_groups
    above 1 (one shared group stays one group whatever the heads)."""
    for slot in ("qk_groups", "kv_groups"):
        if getattr(mixer, slot) not in ("auto", 1):
            return slot
    return None


def _head_dims(mixer: nodes.Mixer, src: HeadLayout, width_to: int, d_to: int) -> list[tuple[int, int]]:
    """(head_dim, halvings) that fit the new inner width, largest first: the first halving of
    head_dim that divides it, then (for group ratios) further ones down to GROUP_MIN_HEAD_DIM.
    PresetError when no halving divides it, or an explicit key_dim cannot halve with it."""
    head_dim, halvings = src.head_dim, 0
    while width_to % head_dim:
        if head_dim % 2:
            raise PresetError(
                f"cannot resize mixer `{mixer.name}` to d_model {d_to}: its {src.heads} heads of "
                f"{src.head_dim} ({src.heads * src.head_dim} wide) scale to {width_to}, and no "
                f"halving of head_dim {src.head_dim} divides {width_to}",
                hint="give the mixer a power-of-two head_dim, or resize the model by hand", mixer=mixer.name)
        head_dim //= 2
        halvings += 1
    if mixer.key_dim != "auto" and mixer.key_dim % 2 ** halvings:
        raise PresetError(
            f"cannot resize mixer `{mixer.name}` to d_model {d_to}: head_dim {src.head_dim} -> "
            f"{head_dim} would take key_dim {mixer.key_dim} to a fraction",
            hint="a key_dim divisible by the same power of two, or resize the model by hand", mixer=mixer.name)
    dims = [(head_dim, halvings)]
    while head_dim % 2 == 0 and head_dim // 2 >= GROUP_MIN_HEAD_DIM and (
            mixer.key_dim == "auto" or mixer.key_dim % 2 ** (halvings + 1) == 0):
        head_dim //= 2
        halvings += 1
        dims.append((head_dim, halvings))
    return dims


def resize_mixer(mixer: nodes.Mixer, d_from: int, d_to: int) -> tuple[nodes.Mixer, list[str], list[str]]:
    """`mixer`, written for a model of width `d_from`, at width `d_to` (module docstring rules),
    with a note for each change and one for each ratio it could not keep."""
    try:
        src = head_layout(mixer, d_from)
    except LayoutError as err:
        raise PresetError(f"cannot resize mixer `{mixer.name}`: {err}", hint=err.fix, mixer=mixer.name) from None
    width_from = src.heads * src.head_dim
    width_to = max(1, round(width_from * d_to / d_from))
    dims = _head_dims(mixer, src, width_to, d_to)
    head_dim, halvings = dims[0]
    grouped = _grouped(mixer)
    per_group = src.heads // getattr(mixer, grouped) if grouped else 1
    for candidate in dims:  # the widest head that keeps the group ratio, if any does
        if (width_to // candidate[0]) % per_group == 0:
            head_dim, halvings = candidate
            break
    heads = width_to // head_dim
    update: dict[str, object] = {"head_dim": head_dim}
    if mixer.heads != "auto":
        update["heads"] = heads
    if mixer.key_dim != "auto" and halvings:
        update["key_dim"] = mixer.key_dim >> halvings
    ratio_kept = heads % per_group == 0
    if grouped:
        update[grouped] = heads // per_group if ratio_kept else _fallback_groups(per_group, heads)
    try:
        resized = nodes.Mixer.model_validate({**mixer.model_dump(), **update})
        layout = head_layout(resized, d_to)
    except (pydantic.ValidationError, LayoutError) as err:
        raise PresetError(f"cannot resize mixer `{mixer.name}` to d_model {d_to}: {err}", mixer=mixer.name) from None
    new_conflicts = {c.message for c in conflicts(resized)} - {c.message for c in conflicts(mixer)}
    if new_conflicts:
        raise PresetError(f"cannot resize mixer `{mixer.name}` to d_model {d_to}: "
                          + "; ".join(sorted(new_conflicts)), mixer=mixer.name)
    notes, not_kept = [], []
    if (layout.heads, layout.head_dim, layout.key_dim) != (src.heads, src.head_dim, src.key_dim):
        keys = f", key_dim {src.key_dim} -> {layout.key_dim}" if layout.key_dim != src.key_dim else ""
        why = f"; head_dim halved to keep {per_group} {_PER_GROUP[grouped]}" \
            if grouped and (head_dim, halvings) != dims[0] else ""
        notes.append(f"mixer {mixer.name}: {_heads(src.heads)} of {src.head_dim} -> {_heads(layout.heads)} of "
                     f"{layout.head_dim}{keys} (inner width {width_from} -> {width_to}{why})")
    if grouped:
        before, after = getattr(mixer, grouped), getattr(resized, grouped)
        if ratio_kept and before != after:
            notes.append(f"mixer {mixer.name}: {grouped} {before} -> {after} ({per_group} {_PER_GROUP[grouped]}, "
                         "as written)")
        elif not ratio_kept:
            mqa = " (multi-query attention)" if grouped == "kv_groups" and after == 1 else ""
            not_kept.append(f"mixer {mixer.name}: {grouped} {before} -> {after}: {per_group} "
                            f"{_PER_GROUP[grouped]} do not divide {_heads(heads)}; now {heads // after}{mqa}")
    return resized, notes, not_kept


def _heads(n: int) -> str:
    return f"{n} head" + ("s" if n != 1 else "")


def _spans(mixer: nodes.Mixer) -> list[tuple[str, tuple[str, ...], int]]:
    """(how it is written, field path, size) of each size in tokens that scales with the context."""
    out: list[tuple[str, tuple[str, ...], int]] = []
    if isinstance(mixer.visibility, (nodes.Window, nodes.ChunkLocal)):
        out.append((mixer.visibility.kind, ("visibility",), mixer.visibility.size))
    if isinstance(mixer.select, nodes.Top) and isinstance(mixer.select.over, nodes.Chunk):
        out.append(("chunk", ("select", "over"), mixer.select.over.size))
    return out


def resize_spans(mixer: nodes.Mixer, ctx_from: int, ctx_to: int,
                 keep_absolute: bool = False) -> tuple[nodes.Mixer, list[str], list[str]]:
    """`mixer` with its windows and chunks scaled from a `ctx_from`- to a `ctx_to`-token context
    (kept in tokens with `keep_absolute`), a note per change and one per ratio not kept."""
    notes, not_kept = [], []
    dump = mixer.model_dump()
    for kind, path, size in _spans(mixer):
        if ctx_from == ctx_to:
            continue
        share = f"{_share(size, ctx_from)} of the {ctx_from}-token context as written"
        if keep_absolute:
            notes.append(f"mixer {mixer.name}: {kind}({size}) kept in tokens (keep_absolute): "
                         f"{_share(size, ctx_to)} of the {ctx_to}-token context, {share}")
            continue
        new = max(1, round(size * ctx_to / ctx_from))
        target = dump
        for part in path:
            target = target[part]
        target["size"] = new
        change = (f"mixer {mixer.name}: {kind}({size}) -> {kind}({new}): {_share(new, ctx_to)} of the "
                  f"{ctx_to}-token context")
        if new * ctx_from == size * ctx_to:
            notes.append(f"{change}, as written")
        else:
            not_kept.append(f"{change}, not the {share} (the nearest whole size)")
    try:
        resized = nodes.Mixer.model_validate(dump)
    except pydantic.ValidationError as err:
        raise PresetError(f"cannot resize mixer `{mixer.name}` to a {ctx_to}-token context: {err}",
                          mixer=mixer.name) from None
    return resized, notes, not_kept


def _share(size: int, context: int) -> str:
    return f"{100.0 * size / context:.3g}%"


def dense_change(before: nodes.Mixer, d_from: int, ctx_from: int,
                 after: nodes.Mixer, d_to: int, ctx_to: int) -> str:
    """A sentence when the resize makes the mixer dense attention or stops it being so
    (seqdsl.ir.key.dense_at); "" when that is unchanged."""
    was = dense_at(mixer_plan(before, d_from).key, ctx_from)
    now = dense_at(mixer_plan(after, d_to).key, ctx_to)
    if was is None and now is not None:
        return f"mixer {after.name}: dense attention at this size ({now.reason}), not as written"
    if was is not None and now is None:
        return (f"mixer {after.name}: no longer dense attention ({was.reason} as written; not at the "
                f"{ctx_to}-token context)")
    return ""


def apply_preset(program: nodes.Program, model: nodes.Model, preset: str, *, context: int | None = None,
                 keep_absolute: bool = False) -> Resized:
    """`model` (of `program`) at the size of `preset`, at `context` tokens when given (`seqdsl
    train`'s seq_len; default the preset's), windows and chunks kept in tokens with
    `keep_absolute`; PresetError if it cannot be resized."""
    if preset not in nodes.PRESET_SIZES:
        raise PresetError(f"unknown preset {preset!r}", hint=f"presets are {one_of(nodes.PRESETS)}")
    sizes = _preset_sizes(preset)
    if context is not None:
        sizes["context"] = context
    layers, notes = preset_layers(model, preset)
    not_kept: list[str] = []
    d_to, ctx_to = sizes["d_model"], sizes["context"]
    mixers = {}
    for name in dict.fromkeys(model.mixer):
        written = program.mixer(name)
        wider, changed, lost = resize_mixer(written, model.d_model, d_to)
        mixers[name], spans, inexact = resize_spans(wider, model.context, ctx_to, keep_absolute)
        notes.extend(changed + spans)
        not_kept.extend(lost + inexact)
        flipped = dense_change(written, model.d_model, model.context, mixers[name], d_to, ctx_to)
        if flipped:
            not_kept.append(flipped)
    try:
        resized = nodes.Model.model_validate({**model.model_dump(), **sizes, "layers": layers,
                                              "name": preset_name(model.name, preset)})
    except pydantic.ValidationError as err:
        raise PresetError(f"cannot resize model `{model.name}` to preset {preset}: {err}") from None
    own = tuple(resized.name if n == model.name else n for n in program.own)
    return Resized(
        program=nodes.Program(mixers=tuple(mixers.get(m.name, m) for m in program.mixers),
                              models=(resized,), own=own),
        model=resized, notes=tuple(notes), not_kept=tuple(not_kept), source=model, preset=preset)


def model_at(program: nodes.Program, name: str | None = None, preset: str | None = None, *,
             context: int | None = None, keep_absolute: bool = False) -> Resized:
    """The model to build from `program`, resized to `preset` when one is given (at `context`
    tokens and with `keep_absolute` as `apply_preset` takes them; both only with a preset).

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
            model = nodes.Model(name=f"{mixer}_110m", mixer=(mixer,), **_preset_sizes("110m"))
            preset = preset or "tiny"
    if preset is None:
        return Resized(program, model, (), source=model)
    return apply_preset(program, model, preset, context=context, keep_absolute=keep_absolute)


def preset_refusals(program: nodes.Program, model: nodes.Model) -> list[tuple[str, PresetError]]:
    """(preset, why) for each preset `model` cannot be resized to, so that `seqdsl check` and
    `seqdsl lower` say so before anyone asks for it. A model whose heads do not fit as written
    is not asked (M003 reports that)."""
    try:
        for name in dict.fromkeys(model.mixer):
            head_layout(program.mixer(name), model.d_model)
    except (LayoutError, KeyError):
        return []
    refusals: list[tuple[str, PresetError]] = []
    for preset in nodes.PRESETS:
        try:
            apply_preset(program, model, preset)
        except PresetError as err:
            refusals.append((preset, err))
    return refusals
