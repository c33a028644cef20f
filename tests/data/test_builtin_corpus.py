"""The builtin corpus: three non-empty domains from files every Python has; code without its
docstrings; a digest that names it."""

from __future__ import annotations

import ast
import sysconfig
from pathlib import Path

import pytest

from seqdsl.data import builtin


def test_the_file_list_is_the_standard_library_proper():
    stdlib = Path(sysconfig.get_paths()["stdlib"])
    files = builtin._stdlib_files()
    assert len(files) > 300 and files == sorted(files, key=lambda p: (p.parent != stdlib, p))
    assert all(p.suffix == ".py" and stdlib in p.parents and not p.name.startswith("test") for p in files)
    assert not any(p.parent.name in builtin._SKIPPED_DIRS for p in files)
    assert stdlib / "json" / "decoder.py" in files


def test_every_domain_has_documents(stdlib_sample):
    source = builtin.BuiltinSource()
    assert source.domains() == ["docstrings", "code", "manual"]
    for domain in builtin.DOMAINS:
        docs = builtin.builtin_documents(domain)
        assert docs and all(d.domain == domain for d in docs)
    # one code document per file, unless nothing but docstrings is left of it (some __init__.py)
    assert len(stdlib_sample) // 2 <= len(builtin.builtin_documents("code")) <= len(stdlib_sample)
    assert len(builtin.digest()) == 12


@pytest.mark.slow
def test_the_whole_standard_library_gives_every_domain_its_documents():
    builtin._corpus.cache_clear()
    for domain in builtin.DOMAINS:
        docs = builtin.builtin_documents(domain)
        assert len(docs) > 100 and all(d.domain == domain for d in docs)
    assert len(builtin.digest()) == 12


def test_code_is_the_source_without_its_docstrings():
    source = '''"""Module doc that is long enough to count as a docstring of eighty characters or more."""
import os


def f(x):
    """A function doc that is also long enough: eighty characters or more, surely by now."""
    return x  # a comment stays


class C:
    """Only a docstring in this body, long enough to be kept as prose in the docstrings domain."""
'''
    docs, code = builtin._split_file(source)
    assert len(docs) == 3
    assert '"""' not in code and "# a comment stays" in code and "class C:\n    pass" in code
    ast.parse(code)  # still Python


def test_documents_stream_in_a_fixed_interleaved_order(stdlib_sample):
    source = builtin.BuiltinSource()
    first = [d.text for d, _ in zip(source.documents(["docstrings", "manual"]), range(200))]
    again = [d.text for d, _ in zip(source.documents(["docstrings", "manual"]), range(200))]
    assert first == again
    manual = set(d.text for d in builtin.builtin_documents("manual"))
    assert 0 < sum(t in manual for t in first) < 200, "domains interleave"
