"""Pillar M, model-level rules: what a model's combination of mixers means.

Each mixer is judged on its own (pillars V, R, N, W); these rules say what the paper did and
did not test about putting mixers together: hybrids of passing and failing layers, and mixers
transplanted into RWKV-7 blocks.
"""

from __future__ import annotations

from seqdsl.check.registry import Finding, ModelContext, rule
from seqdsl.ir import nodes
from seqdsl.ir import layout
from seqdsl.ir.presets import preset_refusals


def _layers(model: nodes.Model) -> dict[str, list[int]]:
    """Mixer name -> the layers that use it (layer l uses mixer[l % len(mixer)])."""
    out: dict[str, list[int]] = {}
    for layer in range(model.layers):
        out.setdefault(model.mixer[layer % len(model.mixer)], []).append(layer)
    return out


def _ranges(layers: list[int]) -> str:
    """`0-1, 3-4, 6` for [0, 1, 3, 4, 6]."""
    parts: list[str] = []
    start: int | None = layers[0]
    for prev, cur in zip(layers, layers[1:] + [None]):
        if cur != prev + 1:
            parts.append(f"{start}" if start == prev else f"{start}-{prev}")
            start = cur
    return ", ".join(parts)


@rule("M001", "hybrid-model", "M", "warning")
def hybrid_model(ctx: ModelContext):
    """A hybrid whose layers get different verdicts: the principle's prediction is untested.

    Why: full-sequence arbitrary selection is a property of one mixing step. A hybrid of
    passing layers (e.g. softmax attention) and failing ones (e.g. Mamba-2) has the property
    in some layers only. The principle suggests the passing layers can provide arbitrary
    selection for the whole model, but the paper did not establish it.

    Paper: every model tested was homogeneous (one mixer in every layer), plus RWKV-7 blocks
    with the Top-1 chunk mixer transplanted. A hybrid whose layers pass and fail is reported as
    degraded: neither a pass nor a fail is supported by evidence.

    Fix: nothing to fix if the hybrid is the experiment; measure it (`seqdsl train` + OOD eval)
    against a homogeneous baseline."""
    verdicts = {name: ctx.mixer_verdicts.get(name, "pass") for name in ctx.model.mixer}
    if len(set(verdicts.values())) < 2:
        return
    layers = _layers(ctx.model)
    parts = [f"{name} ({verdicts[name]}) at layers {_ranges(layers[name])}" for name in layers]
    passing = [n for n in layers if verdicts[n] == "pass"]
    claim = (f"the principle suggests {', '.join(passing)} could provide arbitrary selection for "
             f"the whole model, but the paper did not establish it" if passing else
             "no layer passes")
    yield Finding(
        f"hybrid model: {'; '.join(parts)}; the paper tested homogeneous models (plus RWKV-7 "
        f"blocks with Top-1 transplanted); {claim}",
        ctx.span("mixer"),
        "the principle is established per mixer, for homogeneous models",
        "measure it against a homogeneous baseline")


@rule("M002", "rwkv7-transplant", "M", "info")
def rwkv7_transplant(ctx: ModelContext):
    """A mixer that does not fail, in RWKV-7 blocks: the paper's transplant experiment.

    Why: RWKV-7 blocks differ from Transformer++ blocks around the mixer (token-shifted
    channel mixing instead of a SwiGLU MLP). The paper transplanted the Top-1 chunk mixers into
    RWKV-7 blocks to show that the mixer, not the block, decides base capability.

    Paper: both Top-1 chunk variants (Exact and Approx) were transplanted into RWKV-7 blocks to
    validate the principle; other passing mixers in RWKV-7 blocks were not tested.

    Fix: nothing to fix; this is a note."""
    if ctx.model.block != "rwkv7":
        return
    kept = [n for n in dict.fromkeys(ctx.model.mixer) if ctx.mixer_verdicts.get(n) != "fail"]
    if not kept:
        return
    chunk = [n for n in kept if _is_top1_chunk(ctx.program.mixer(n))]
    tested = ("as the paper did with Top-1 chunk selection (Exact and Approx)"
              if len(chunk) == len(kept) else
              "the paper transplanted Top-1 chunk selection only")
    shown = ", ".join(f"{n} ({ctx.mixer_verdicts.get(n)})" for n in kept)
    yield Finding(
        f"RWKV-7 blocks around {shown}: {tested}",
        ctx.span("block"),
        "the block layout is not what the principle judges; the mixer is",
        "nothing to fix")


def _is_top1_chunk(m: nodes.Mixer) -> bool:
    return isinstance(m.select, nodes.Top) and m.select.k == 1 and isinstance(m.select.over, nodes.Chunk)


@rule("M003", "head-layout", "M", "error")
def head_layout(ctx: ModelContext):
    """The heads must fit: `heads = auto` needs expand x d_model to be a multiple of head_dim,
    and `qk_groups` / `kv_groups` must divide the number of heads.

    Why: with `heads = auto` a mixer takes expand * d_model / head_dim heads from the model;
    when that does not divide, there is no whole number of heads and the model cannot be built.

    Paper: not a finding of the paper.

    Fix: set `heads` explicitly, or change `head_dim`, `expand`, `d_model`, `qk_groups` or `kv_groups` so
    they divide."""
    for name in dict.fromkeys(ctx.model.mixer):  # each mixer once, in layer order
        try:
            layout.head_layout(ctx.program.mixer(name), ctx.model.d_model)
        except layout.LayoutError as err:
            yield Finding(str(err), ctx.span("d_model"), "the model cannot be built", err.fix)


@rule("M004", "preset-refused", "M", "warning")
def preset_refused(ctx: ModelContext):
    """A model that a preset cannot resize: `--preset` would refuse it.

    Why: `seqdsl lower --preset`, `seqdsl train` (whose default preset is `tiny`) and
    `build_lm(preset=...)` resize a model by scaling its heads with the width
    (seqdsl/ir/presets.py). A head_dim no halving of which divides the new inner width (96 at
    the tiny width of 128: 48, 24, 12, 6, 3 never divide it) cannot be resized, so the CPU-scale
    run of the ablation cannot be made. Better to know when the spec is written than when the
    run is launched.

    Paper: the paper's models use head dims of 64 and 128, which every preset can resize.

    Fix: a power-of-two head_dim (64 or 128), or write the small model by hand and train it
    without a preset (`--set preset=null`)."""
    for preset, err in preset_refusals(ctx.program, ctx.model):
        where = ctx.sources.get("mixer", err.mixer, "head_dim") if err.mixer else ctx.span("mixer")
        yield Finding(f"preset {preset}: {err.message}", where,
                      "the ablation cannot be run at that size", err.hint or "resize the model by hand")
