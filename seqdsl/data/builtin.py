"""The builtin corpus: real text that every Python installation has, in three domains.

    docstrings  the docstrings (>= 80 characters) of the standard library's modules, classes and
                functions: technical English prose. The default training domain.
    code        the same source files with their docstrings removed: Python code (with comments).
    manual      the Python language reference shipped for `help()` (`pydoc_data/topics.py`):
                reStructuredText-like manual prose with grammar rules and examples, cut into
                paragraph-aligned pieces of about 2,000 characters.

Files are read as text and parsed with `ast` (nothing is imported or executed), in sorted path
order. The file list is the standard library's `*.py` and `*/*.py` minus tests, `idlelib`,
`turtledemo` and installed packages (site-packages), so the corpus does not depend on what else
the machine has installed. It is NOT web text and it is small (a few MB): an embedded default for
smoke runs, tests and the README's command, not a pretraining corpus. Its exact content depends on
the Python version; `digest()` hashes every file read (path and bytes), so results name it.
"""

from __future__ import annotations

import ast
import functools
import hashlib
import sys
import sysconfig
from pathlib import Path

from seqdsl.data.documents import Document

DOMAINS = ("docstrings", "code", "manual")
MIN_DOCSTRING = 80
MANUAL_PIECE = 2_000
# folders of the standard library that are not part of it proper, or that are tests
_SKIPPED_DIRS = {"site-packages", "dist-packages", "test", "tests", "idlelib", "turtledemo", "lib2to3"}


def _stdlib_files() -> list[Path]:
    stdlib = Path(sysconfig.get_paths()["stdlib"])
    files = sorted(stdlib.glob("*.py")) + sorted(stdlib.glob("*/*.py"))
    return [p for p in files
            if not (p.parent != stdlib and p.parent.name in _SKIPPED_DIRS) and not p.name.startswith("test")]


def _docstring_nodes(tree: ast.AST):
    for node in ast.walk(tree):
        if isinstance(node, (ast.Module, ast.ClassDef, ast.FunctionDef, ast.AsyncFunctionDef)):
            body = node.body
            if body and isinstance(body[0], ast.Expr) and isinstance(getattr(body[0], "value", None), ast.Constant) \
                    and isinstance(body[0].value.value, str):
                yield node, body[0]


def _split_file(source: str) -> tuple[list[str], str] | None:
    """(docstrings of >= MIN_DOCSTRING characters, the code with every docstring's lines removed),
    or None when the file does not parse."""
    try:
        tree = ast.parse(source)
    except (SyntaxError, ValueError):
        return None
    docs, drop = [], set()
    lines = source.splitlines(keepends=True)
    for node, expr in _docstring_nodes(tree):
        doc = ast.get_docstring(node)
        if doc and len(doc) >= MIN_DOCSTRING:
            docs.append(doc)
        if expr.lineno == getattr(node, "lineno", None):
            continue  # `def f(): "doc"` on one line: keep the line, it is code too
        # a docstring alone in a body still needs a statement there: replace it by `pass`
        only = len(node.body) == 1 and not isinstance(node, ast.Module)
        for line in range(expr.lineno, expr.end_lineno + 1):
            drop.add(line)
        if only:
            indent = lines[expr.lineno - 1][: expr.col_offset]
            lines[expr.lineno - 1] = f"{indent}pass\n"
            drop.discard(expr.lineno)
    code = "".join(line for i, line in enumerate(lines, start=1) if i not in drop)
    return docs, code


def _pieces(text: str, size: int) -> list[str]:
    """`text` cut at blank lines into pieces of at least `size` characters (the last may be shorter)."""
    out, current = [], []
    length = 0
    for para in text.split("\n\n"):
        current.append(para)
        length += len(para) + 2
        if length >= size:
            out.append("\n\n".join(current))
            current, length = [], 0
    if current:
        out.append("\n\n".join(current))
    return out


@functools.lru_cache(maxsize=1)
def _corpus() -> tuple[dict[str, tuple[Document, ...]], str]:
    """Every domain's documents, and the digest of the files they come from."""
    h = hashlib.sha256(f"python {sys.version_info[:3]}".encode())
    stdlib = Path(sysconfig.get_paths()["stdlib"])
    docstrings: list[Document] = []
    code: list[Document] = []
    for path in _stdlib_files():
        try:
            raw = path.read_bytes()
            source = raw.decode("utf-8")
        except (OSError, UnicodeDecodeError):
            continue
        split = _split_file(source)
        if split is None:
            continue
        rel = path.relative_to(stdlib).as_posix()
        h.update(rel.encode() + b"\0" + hashlib.sha256(raw).digest())
        docs, stripped = split
        docstrings.extend(Document("docstrings", d) for d in docs)
        if stripped.strip():
            code.append(Document("code", stripped))
    from pydoc_data import topics  # the language reference text behind help(); always installed

    manual = [Document("manual", piece) for key in sorted(topics.topics)
              for piece in _pieces(topics.topics[key], MANUAL_PIECE)]
    h.update(b"pydoc_data.topics\0" + repr(sorted(topics.topics.items())).encode())
    return {"docstrings": tuple(docstrings), "code": tuple(code), "manual": tuple(manual)}, h.hexdigest()[:12]


def builtin_documents(domain: str) -> tuple[Document, ...]:
    """The documents of one builtin domain, in file order."""
    return _corpus()[0][domain]


def digest() -> str:
    """A short hash naming this machine's builtin corpus: the Python version, every source file's
    path and bytes, and the manual's text."""
    return _corpus()[1]


class BuiltinSource:
    """The builtin corpus as a `DocumentSource`. Documents stream in the order of their text's
    hash (fixed, seed-independent), so modules and, in a mixed-domain run, domains interleave
    instead of arriving file by file."""

    def domains(self) -> list[str]:
        return list(DOMAINS)

    def documents(self, domains: list[str]):
        chosen = [doc for domain in DOMAINS if domain in domains for doc in builtin_documents(domain)]
        yield from sorted(chosen, key=_order_key)

    def describe(self) -> str:
        return f"builtin:{digest()}"

    def content(self) -> list[str]:
        return [self.describe()]


def _order_key(doc: Document) -> bytes:
    return hashlib.sha256(doc.text.encode("utf-8")).digest()
