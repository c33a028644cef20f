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
