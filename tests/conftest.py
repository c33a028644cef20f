"""Hypothesis profiles for the whole suite, and fixtures that several test folders share.

    ci         (the default) a few dozen examples per property: the fast suite stays within a
               minute on 2 cores. Where the environment variable CI is set (CI sets CI=true,
               .ci/run), the draws are derandomized: every CI run tries the same examples, so
               a red CI is reproducible and a green one does not turn red on a lucky draw.
               Outside CI every run draws fresh examples, so local runs keep exploring.
    thorough   hundreds of examples per property, fresh on every run, for a deliberate search:
               HYPOTHESIS_PROFILE=thorough python3 -m pytest tests/language
               (or `--hypothesis-profile thorough`). A failure it finds becomes a
               deterministic test (or an `@example`), not a CI gamble.

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

# Without a GPU the generated Triton kernels run under Triton's interpreter (tests/kernels, and
# tests/lower/test_parameters_reach_every_path.py). Triton reads TRITON_INTERPRET when its language
# modules are imported, which importing torch._dynamo does: so it is set here, before any test
# module is imported, whatever order the folders are collected in; an explicit setting wins.
if not os.environ.get("TRITON_INTERPRET"):
    import torch

    if not torch.cuda.is_available():
        os.environ["TRITON_INTERPRET"] = "1"

# SEQDSL_TEST_TIMEOUT=N (seconds) fails a test still running after N seconds and goes on with the
# next: a GPU round (benchmarks/regression_gpu_round.sh) deals many tests to one process per GPU,
# and one kernel stuck in its first call used to leave every test queued behind it unrun. The
# alarm interrupts Python code (compilation, autotuning loops), not a call stuck inside C.
TEST_TIMEOUT = int(os.environ.get("SEQDSL_TEST_TIMEOUT", "0") or 0)


class TimedOut(Exception):
    """A test ran past SEQDSL_TEST_TIMEOUT."""


if TEST_TIMEOUT > 0:
    import signal

    @pytest.hookimpl(hookwrapper=True)
    def pytest_runtest_call(item):
        def stop(signum, frame):
            raise TimedOut(f"{item.nodeid} still running after SEQDSL_TEST_TIMEOUT={TEST_TIMEOUT} s")

        previous = signal.signal(signal.SIGALRM, stop)
        signal.alarm(TEST_TIMEOUT)
        try:
            yield
        finally:
            signal.alarm(0)
            signal.signal(signal.SIGALRM, previous)


IN_CI = os.environ.get("CI", "").lower() not in ("", "0", "false")
settings.register_profile("ci", max_examples=25, deadline=None, derandomize=IN_CI)
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


@pytest.fixture(autouse=True, scope="session")
def _private_cache_root(tmp_path_factory):
    """Every cache the tests fill (token caches, self-check verdicts, kernels) lives in a temporary
    root for the session, never the user's ~/.cache/seqdsl; a root set explicitly is kept."""
    if os.environ.get("SEQDSL_CACHE_DIR"):
        yield
        return
    os.environ["SEQDSL_CACHE_DIR"] = str(tmp_path_factory.mktemp("seqdsl_cache"))
    try:
        yield
    finally:
        os.environ.pop("SEQDSL_CACHE_DIR", None)
