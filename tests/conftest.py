"""Hypothesis profiles for the whole suite, and fixtures that several test folders share.

    ci         (the default) a few dozen examples per property: the fast suite stays within a
               minute on 2 cores. Every run draws fresh examples, so CI keeps exploring over runs.
    thorough   hundreds of examples per property, for a deliberate search:
               HYPOTHESIS_PROFILE=thorough python3 -m pytest tests/language
               (or `--hypothesis-profile thorough`).

Properties whose examples are cheap keep their own, larger `max_examples`; the others take the
profile's count.
"""

from __future__ import annotations

import os

import pytest
from hypothesis import settings

# Under pytest-xdist (the README's `-n 2`) each worker runs torch on one intra-op thread: the
# tests' tensors are small, and two workers with two threads each on 2 cores only contend (an
# explicit OMP_NUM_THREADS wins). Set before any test module imports torch.
if os.environ.get("PYTEST_XDIST_WORKER"):
    os.environ.setdefault("OMP_NUM_THREADS", "1")

settings.register_profile("ci", max_examples=25, deadline=None)
settings.register_profile("thorough", max_examples=500, deadline=None)
settings.load_profile(os.environ.get("HYPOTHESIS_PROFILE", "ci"))


@pytest.fixture
def stdlib_sample():
    """The builtin corpus (seqdsl/data/builtin.py) built from every third standard-library file
    under 8 kB (~70 files, 0.1 s), for one test; yields those files. Parsing all of them takes
    seconds (the whole corpus is tests/data/test_builtin_corpus.py's slow test), and small files
    keep evaluation sets small (a code document is a whole file)."""
    from seqdsl.data import builtin

    files = [p for p in builtin._stdlib_files() if p.stat().st_size < 8_000][::3]
    with pytest.MonkeyPatch.context() as patch:
        patch.setattr(builtin, "_stdlib_files", lambda: files)
        builtin._corpus.cache_clear()
        yield files
    builtin._corpus.cache_clear()
