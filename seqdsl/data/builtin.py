"""The builtin corpus: real English text that every machine with Python has.

It is the docstrings of the Python standard library's modules, classes and functions, read from
the source files with `ast` (nothing is imported or executed), in sorted file order. Technical
prose, not web text: it is the embedded default for smoke runs and tests that need real text
with no data files and no network. Its exact content depends on the Python version; `digest()`
names it, so results can say which one they used.
"""

from __future__ import annotations

import ast
import functools
import hashlib
import sysconfig
from pathlib import Path

MAX_CHARS = 2_000_000


def _docstrings(path: Path):
    try:
        tree = ast.parse(path.read_text(encoding="utf-8"))
    except (SyntaxError, UnicodeDecodeError, OSError, ValueError):
        return
    for node in ast.walk(tree):
        if isinstance(node, (ast.Module, ast.ClassDef, ast.FunctionDef, ast.AsyncFunctionDef)):
            doc = ast.get_docstring(node)
            if doc and len(doc) >= 80:
                yield doc


@functools.lru_cache(maxsize=1)
def builtin_text(max_chars: int = MAX_CHARS) -> str:
    """Up to `max_chars` characters of standard-library docstrings, separated by blank lines."""
    stdlib = Path(sysconfig.get_paths()["stdlib"])
    parts, total = [], 0
    for path in sorted(stdlib.glob("*.py")) + sorted(stdlib.glob("*/*.py")):
        if "test" in path.parts[-2:][0] or path.name.startswith("test"):
            continue
        for doc in _docstrings(path):
            parts.append(doc)
            total += len(doc) + 2
            if total >= max_chars:
                return "\n\n".join(parts)[:max_chars]
    return "\n\n".join(parts)


def digest() -> str:
    """A short hash naming this machine's builtin corpus."""
    return hashlib.sha256(builtin_text().encode()).hexdigest()[:12]
