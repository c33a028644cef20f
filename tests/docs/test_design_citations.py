"""Code, specs and docs cite the design notes as `docs/design.md §N` and other docs by path:
every citation must land on a section or file that exists in the repository."""

from __future__ import annotations

import re
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
SOURCES = ["seqdsl", "tests", "docs", "specs", "grammar", "benchmarks", "codegen", "kernels", "README.md"]
SUFFIXES = {".py", ".md", ".seq", ".lark"}


def _texts():
    for name in SOURCES:
        base = ROOT / name
        for path in [base] if base.is_file() else sorted(base.rglob("*")):
            if path.suffix in SUFFIXES and path.is_file():
                yield path, path.read_text(encoding="utf-8")


def _design_sections() -> set[str]:
    return set(re.findall(r"^## §(\d+) ", (ROOT / "docs" / "design.md").read_text(), re.M))


def test_design_sections_are_numbered_one_to_eight():
    assert _design_sections() == {str(n) for n in range(1, 9)}


def test_every_design_citation_names_an_existing_section():
    sections = _design_sections()
    cited = 0
    for path, text in _texts():
        for m in re.finditer(r"design\.md`?\s*((?:§\d+(?:,\s*)?)+)", text):
            for n in re.findall(r"§(\d+)", m.group(1)):
                cited += 1
                assert n in sections, f"{path.relative_to(ROOT)} cites design.md §{n}, which does not exist"
    assert cited >= 10, "the citations this test guards were not found"


def test_every_cited_doc_exists():
    for path, text in _texts():
        for doc in set(re.findall(r"\bdocs/([A-Za-z_]+\.md)\b", text)):
            assert (ROOT / "docs" / doc).is_file(), f"{path.relative_to(ROOT)} cites docs/{doc}"
