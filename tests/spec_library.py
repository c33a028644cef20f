"""The spec library as test parameters: every file in specs/, lowered at test size."""

from __future__ import annotations

from pathlib import Path

import seqdsl
from seqdsl.ir import nodes

SPECS_DIR = Path(__file__).resolve().parents[1] / "specs"
SPEC_FILES = sorted(SPECS_DIR.glob("*.seq"))
SPEC_IDS = [p.stem for p in SPEC_FILES]


def spec_model(path: Path, **sizes) -> tuple[nodes.Program, nodes.Model]:
    """The spec's model at the `tiny` preset (seqdsl/ir/presets.py: heads resized with the width),
    with `sizes` overrides; unless `layers` is given, the fewest layers that hold two (and a whole
    number of) periods of its layer pattern, to keep tests fast."""
    from seqdsl.ir.presets import model_at

    resized = model_at(seqdsl.load(path).program, preset="tiny")
    period = len(resized.model.mixer)
    sizes.setdefault("layers", period * max(1, -(-2 // period)))
    return resized.program, resized.model.model_copy(update=sizes)


def at_most_heads(program: nodes.Program, model: nodes.Model, max_heads: int = 64) -> nodes.Model:
    """The model, narrowed (d_model scaled down) so that no mixer has more than `max_heads` heads.
    Mamba-1 has one head per inner channel (2 x d_model = 256 at the tiny width) and a per-entry
    decay whose chunked reference holds (B, H, T, 64, Dk) tensors: seconds per forward at the tiny
    width, a tenth of that at 64 heads, where every per-head code path still runs."""
    from seqdsl.ir.layout import head_layout

    heads = max(head_layout(program.mixer(name), model.d_model).heads for name in model.mixer)
    if heads <= max_heads:
        return model
    return model.model_copy(update={"d_model": model.d_model * max_heads // heads})


def longest_chunk(program: nodes.Program, model: nodes.Model) -> int:
    """The largest selection/visibility chunk among the model's mixers (1 if none), so tests
    can use sequences that span several chunks."""
    size = 1
    for name in model.mixer:
        m = program.mixer(name)
        if isinstance(m.select, nodes.Top) and isinstance(m.select.over, nodes.Chunk):
            size = max(size, m.select.over.size)
        if isinstance(m.visibility, (nodes.ChunkLocal, nodes.Window)):
            size = max(size, m.visibility.size)
    return size


def shrink_mixer(mixer: nodes.Mixer, size: int) -> nodes.Mixer:
    """The mixer with its window, chunk-local size and selection chunk cut to at most `size`."""
    update = {}
    if isinstance(mixer.visibility, (nodes.Window, nodes.ChunkLocal)):
        update["visibility"] = mixer.visibility.model_copy(update={"size": min(size, mixer.visibility.size)})
    sel = mixer.select
    if isinstance(sel, nodes.Top) and isinstance(sel.over, nodes.Chunk):
        over = sel.over.model_copy(update={"size": min(size, sel.over.size)})
        update["select"] = sel.model_copy(update={"over": over})
    return mixer.model_copy(update=update)


def shrunk_spec_model(path: Path, size: int = 16, **sizes) -> tuple[nodes.Program, nodes.Model]:
    """`spec_model`, with every window and chunk cut to `size` tokens, so that sequences of a few
    `size`s make windows exclude keys, give Top-1 chunk queries several candidate chunks and make
    decoding cross chunk boundaries (the library's 256-2048 windows and chunk(128) never bite
    within the tiny preset's context)."""
    program, model = spec_model(path, **sizes)
    mixers = tuple(shrink_mixer(m, size) for m in program.mixers)
    return program.model_copy(update={"mixers": mixers}), model
