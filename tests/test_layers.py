"""The import rule (docs/design.md §3), read off the source statically: every import, lazy ones
inside functions included, runs downward through the layers below; no two modules import each
other, even through others; the static core imports neither torch nor triton. A new package must
be given a layer here before it can be imported."""

from __future__ import annotations

import ast
from collections.abc import Iterator
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]

# Higher imports lower, never the reverse; packages of one layer do not import each other.
LAYERS: tuple[tuple[str, ...], ...] = (
    ("cli",),
    ("seqdsl",),  # the package's own namespace: the public API (`seqdsl.loads`, `generate_text`)
    ("probe",),  # `seqdsl probe`: trains small models on synthetic tasks with train's optimiser
    ("train", "eval", "text"),  # `seqdsl train`, `seqdsl eval`; text: generate_text
    ("run",),  # what a run is: config, data resolution, digest, checkpoints, held-out loss
    ("check", "fmt"),
    ("lower",),
    ("kernels",),
    ("codegen",),
    ("reference", "data", "jsonl"),  # jsonl: record files that survive a killed writer
    ("custom_ops",),  # torch.library ops named by their schema (kernels', lower's backends')
    ("passes",),
    ("parse", "ir"),
    ("errors", "cache_root", "version", "atomic"),  # atomic: whole-file rewrites (seqdsl/atomic.py)
)
RANK = {name: len(LAYERS) - i for i, layer in enumerate(LAYERS) for name in layer}
STATIC = ("parse", "ir", "passes", "check", "codegen")  # no torch, no triton (docs/design.md §1)
HEAVY = ("torch", "triton")
# where each unit's source lives: seqdsl/<unit>/ or seqdsl/<unit>.py, and the folders shipped
# inside the package (pyproject.toml's package-dir)
SHIPPED = {"codegen": ROOT / "codegen", "kernels": ROOT / "kernels", "grammar": ROOT / "grammar"}


def unit_files() -> Iterator[tuple[str, Path]]:
    """(unit, file) of every Python file of the package."""
    yield "seqdsl", ROOT / "seqdsl" / "__init__.py"
    for path in sorted((ROOT / "seqdsl").iterdir()):
        if path.is_dir() and path.name not in SHIPPED and (path / "__init__.py").is_file():
            yield from ((path.name, f) for f in sorted(path.rglob("*.py")))
        elif path.suffix == ".py" and path.name != "__init__.py":
            yield path.stem, path
    for name, folder in SHIPPED.items():
        yield from ((name, f) for f in sorted(folder.rglob("*.py")))


def _unit_of(module: str) -> str | None:
    """The unit a `seqdsl...` module belongs to; None for anything outside the package."""
    parts = module.split(".")
    if parts[0] != "seqdsl":
        return None
    return parts[1] if len(parts) > 1 else "seqdsl"


def imports(path: Path) -> Iterator[tuple[str, int]]:
    """(imported module, line) of every absolute import in `path`, at any depth; `from seqdsl
    import x` counts as `seqdsl.x` when x is a unit, else as the package's namespace."""
    for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
        if isinstance(node, ast.Import):
            yield from ((alias.name, node.lineno) for alias in node.names)
        elif isinstance(node, ast.ImportFrom) and node.level == 0 and node.module:
            if node.module == "seqdsl":
                yield from ((f"seqdsl.{a.name}" if a.name in RANK else "seqdsl", node.lineno) for a in node.names)
            else:
                yield node.module, node.lineno


def _where(path: Path, line: int) -> str:
    return f"{path.relative_to(ROOT)}:{line}"


def test_every_unit_has_a_layer():
    assert not {unit for unit, _ in unit_files()} - set(RANK) - {"grammar"}


def test_imports_run_downward():
    upward = [f"{_where(path, line)}: {unit} imports {module}"
              for unit, path in unit_files() for module, line in imports(path)
              if (target := _unit_of(module)) not in (None, unit) and RANK[target] >= RANK[unit]]
    assert not upward, "imports that do not run downward:\n" + "\n".join(upward)


def test_the_static_core_imports_neither_torch_nor_triton():
    heavy = [f"{_where(path, line)}: {module}" for unit, path in unit_files() if unit in STATIC
             for module, line in imports(path) if module.split(".")[0] in HEAVY]
    assert not heavy, "the static core imports:\n" + "\n".join(heavy)


def _module_name(unit: str, path: Path) -> str:
    base = SHIPPED[unit] if unit in SHIPPED else ROOT / "seqdsl"
    parts = ["seqdsl", *([unit] if unit in SHIPPED else []), *path.relative_to(base).with_suffix("").parts]
    return ".".join(parts[:-1] if parts[-1] == "__init__" else parts)


def module_graph() -> dict[str, set[str]]:
    """{module: the package's modules it imports}; `from a import b` imports module a.b when
    there is one, else a."""
    files = {_module_name(unit, path): path for unit, path in unit_files()}
    graph: dict[str, set[str]] = {}
    for name, path in files.items():
        targets = set()
        for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
            if isinstance(node, ast.Import):
                targets |= {alias.name for alias in node.names}
            elif isinstance(node, ast.ImportFrom) and node.level == 0 and node.module:
                targets |= {f"{node.module}.{a.name}" if f"{node.module}.{a.name}" in files else node.module
                            for a in node.names}
        graph[name] = {t for t in targets if t in files and t != name}
    return graph


def test_no_module_imports_itself_through_others():
    graph, state, cycles = module_graph(), {}, []

    def visit(module: str, path: list[str]) -> None:
        state[module] = "open"
        for target in sorted(graph[module]):
            if state.get(target) == "open":
                cycles.append(" -> ".join(path[path.index(target):] + [module, target]))
            elif target not in state:
                visit(target, path + [module])
        state[module] = "done"

    for module in sorted(graph):
        if module not in state:
            visit(module, [])
    assert not cycles, "import cycles:\n" + "\n".join(cycles)


def test_the_rule_catches_an_upward_import(tmp_path):
    """The scan sees a lazy import inside a function, as the rule needs."""
    planted = tmp_path / "planted.py"
    planted.write_text("def f():\n    from seqdsl.train.run import train\n")
    assert [(_unit_of(m), line) for m, line in imports(planted)] == [("train", 2)]
