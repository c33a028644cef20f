"""The static core imports neither torch nor triton, read from the source (docs/design.md §3).

The parse, IR, passes, check and codegen packages answer without a GPU stack: `seqdsl check`
runs on a laptop in well under a second. Each of their modules is parsed (`ast`, nothing is
imported), and its imports are followed through every seqdsl module it reaches, the ones inside
functions included (a lazy import still runs when the function does). Skipped: `if
TYPE_CHECKING:` blocks, and a package's `__getattr__` (PEP 562), which imports only when a caller
asks for that name: `seqdsl.generate_text`. tests/fresh_imports.py checks the same promise at run time, for the entry
points; this test names the chain of imports that breaks it.
"""

from __future__ import annotations

import ast
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
# the package's folders (pyproject.toml: package-dir): codegen/ and kernels/ ship as seqdsl.*
PACKAGE_DIRS = {"seqdsl": ROOT / "seqdsl", "seqdsl.grammar": ROOT / "grammar",
                "seqdsl.codegen": ROOT / "codegen", "seqdsl.kernels": ROOT / "kernels"}
STATIC_CORE = ("seqdsl.parse", "seqdsl.ir", "seqdsl.passes", "seqdsl.check", "seqdsl.codegen")
HEAVY = ("torch", "triton")


def _modules() -> dict[str, Path]:
    """Every module of the package, by dotted name."""
    found = {}
    for package, folder in PACKAGE_DIRS.items():
        for path in folder.rglob("*.py"):
            parts = path.relative_to(folder).with_suffix("").parts
            name = ".".join((package, *parts))
            found[name.removesuffix(".__init__")] = path
    return found


MODULES = _modules()


def _is_type_checking(node: ast.If) -> bool:
    test = node.test
    return (isinstance(test, ast.Name) and test.id == "TYPE_CHECKING") or (
        isinstance(test, ast.Attribute) and test.attr == "TYPE_CHECKING")


def _imported(name: str, path: Path) -> set[str]:
    """The dotted names `name`'s source imports (a `from a import b` gives a.b when that is a
    module of ours, else a)."""
    package = name if path.name == "__init__.py" else name.rpartition(".")[0]
    out: set[str] = set()

    def visit(node: ast.AST) -> None:
        if isinstance(node, ast.If) and _is_type_checking(node):
            for child in node.orelse:
                visit(child)
            return
        if isinstance(node, ast.Import):
            out.update(alias.name for alias in node.names)
        elif isinstance(node, ast.ImportFrom):
            base = node.module or ""
            if node.level:
                anchor = package.split(".")[:len(package.split(".")) - node.level + 1]
                base = ".".join(anchor + ([base] if base else []))
            out.update(f"{base}.{a.name}" if f"{base}.{a.name}" in MODULES else base for a in node.names)
        for child in ast.iter_child_nodes(node):
            visit(child)

    for node in ast.parse(path.read_text(), str(path)).body:
        if not (isinstance(node, ast.FunctionDef) and node.name == "__getattr__"):
            visit(node)
    return out


def _parents(name: str) -> list[str]:
    """Importing a.b.c runs a/__init__ and a/b/__init__ first."""
    parts = name.split(".")
    return [".".join(parts[:i]) for i in range(1, len(parts))]


def heavy_chain(start: str) -> list[str] | None:
    """The chain of imports from `start` to torch or triton, or None when there is none."""
    seen, queue = {start: [start]}, [start]
    while queue:
        current = queue.pop(0)
        for target in sorted(_imported(current, MODULES[current])):
            if target.split(".")[0] in HEAVY:
                return seen[current] + [target]
            for dep in [*_parents(target), target]:
                if dep in MODULES and dep not in seen:
                    seen[dep] = seen[current] + [dep]
                    queue.append(dep)
    return None


CORE = sorted(m for m in MODULES if any(m == p or m.startswith(p + ".") for p in STATIC_CORE))


def test_the_scan_sees_the_static_core_and_a_heavy_module():
    assert {"seqdsl.ir.plan", "seqdsl.check.engine", "seqdsl.codegen.choices"} <= set(CORE)
    assert heavy_chain("seqdsl.lower.mixer") is not None  # the scan finds torch where it is


@pytest.mark.parametrize("module", CORE)
def test_the_static_core_imports_neither_torch_nor_triton(module):
    chain = heavy_chain(module)
    assert chain is None, " -> ".join(chain)
