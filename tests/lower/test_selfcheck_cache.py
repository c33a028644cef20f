"""Self-check verdicts are kept on disk (seqdsl/lower/verdicts.py): checked once per machine and
version set, re-checked when anything they depend on changes or the file is unreadable."""

from __future__ import annotations

import time

import torch

from seqdsl.lower import verdicts

CPU = torch.device("cpu")


def _counting(result):
    calls = []

    def check():
        calls.append(1)
        return result

    return check, calls


def test_a_verdict_is_computed_once_then_read_back(tmp_path, monkeypatch):
    monkeypatch.setenv("SEQDSL_CACHE_DIR", str(tmp_path))
    check, calls = _counting((False, "dq differs by 3e-1"))
    facts = {"op": "fla.chunk_gla", "dtype": torch.bfloat16}
    assert verdicts.cached(facts, CPU, check) == (False, "dq differs by 3e-1")
    assert verdicts.cached(facts, CPU, check) == (False, "dq differs by 3e-1")
    assert len(calls) == 1 and len(list((tmp_path / "selfcheck").glob("*.json"))) == 1


def test_other_facts_or_versions_are_checked_again(tmp_path, monkeypatch):
    monkeypatch.setenv("SEQDSL_CACHE_DIR", str(tmp_path))
    check, calls = _counting((True, ""))
    verdicts.cached({"op": "a", "dtype": torch.float32}, CPU, check)
    verdicts.cached({"op": "a", "dtype": torch.bfloat16}, CPU, check)
    monkeypatch.setattr(verdicts, "_versions", lambda: {"triton": "9.9.9"})
    verdicts.cached({"op": "a", "dtype": torch.float32}, CPU, check)
    assert len(calls) == 3


def test_a_change_to_seqdsls_own_source_is_checked_again(tmp_path, monkeypatch):
    """The version stays 0.1.0 while a fast path's code changes: the source digest is a fact."""
    monkeypatch.setenv("SEQDSL_CACHE_DIR", str(tmp_path / "cache"))
    check, calls = _counting((True, ""))
    verdicts.cached({"op": "a", "dtype": torch.float32}, CPU, check)
    monkeypatch.setattr(verdicts, "source_digest", lambda: "another source")
    verdicts.cached({"op": "a", "dtype": torch.float32}, CPU, check)
    assert len(calls) == 2


def test_the_source_digest_follows_the_files(tmp_path, monkeypatch):
    package = tmp_path / "pkg"
    (package / "sub").mkdir(parents=True)
    (package / "sub" / "kernel.py").write_text("x = 1\n")
    (package / "notes.txt").write_text("not source")
    spec = type("Spec", (), {"submodule_search_locations": [str(package)]})
    monkeypatch.setattr(verdicts.importlib.util, "find_spec", lambda name: spec)
    digest = lambda: (verdicts.source_digest.cache_clear(), verdicts.source_digest())[1]
    first = digest()
    (package / "notes.txt").write_text("changed, but not source")
    assert digest() == first
    (package / "sub" / "kernel.py").write_text("x = 2\n")
    assert digest() != first
    verdicts.source_digest.cache_clear()


def test_an_unreadable_verdict_file_is_checked_again(tmp_path, monkeypatch):
    monkeypatch.setenv("SEQDSL_CACHE_DIR", str(tmp_path))
    check, calls = _counting((True, ""))
    verdicts.cached({"op": "a"}, CPU, check)
    (path,) = (tmp_path / "selfcheck").glob("*.json")
    path.write_text('{"facts": {"op"')  # a write killed half-way
    assert verdicts.cached({"op": "a"}, CPU, check) == (True, "")
    assert len(calls) == 2


def test_the_store_can_be_turned_off(tmp_path, monkeypatch):
    monkeypatch.setenv("SEQDSL_CACHE_DIR", str(tmp_path))
    monkeypatch.setenv("SEQDSL_SELFCHECK_CACHE", "0")
    check, calls = _counting((True, ""))
    verdicts.cached({"op": "a"}, CPU, check)
    verdicts.cached({"op": "a"}, CPU, check)
    assert len(calls) == 2 and not (tmp_path / "selfcheck").exists()


def test_the_time_spent_in_checks_is_counted_for_the_first_step_record(tmp_path, monkeypatch):
    """The time to first step says how much of it went into first-use checks: each computed
    check adds its wall time, each verdict read back from disk counts as kept."""
    monkeypatch.setenv("SEQDSL_CACHE_DIR", str(tmp_path))
    before = verdicts.spent()

    def slow_check():
        t0 = time.perf_counter()
        while time.perf_counter() - t0 < 0.05:
            pass
        return True, ""

    facts = {"op": "timed", "dtype": torch.float32}
    verdicts.cached(facts, CPU, slow_check)
    verdicts.cached(facts, CPU, slow_check)
    after = verdicts.spent()
    assert (after.computed - before.computed, after.kept - before.kept) == (1, 1)
    assert 0.05 <= after.seconds - before.seconds < 5.0
    monkeypatch.setenv("SEQDSL_SELFCHECK_CACHE", "0")  # no store: every check is computed and timed
    verdicts.cached(facts, CPU, slow_check)
    assert verdicts.spent().computed - before.computed == 2
