"""SEQDSL_TEST_TIMEOUT (tests/conftest.py): a test still running after N seconds fails with the
reason, and the tests after it run; unset, nothing is interrupted."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
SLOW_THEN_FAST = "import time\n\ndef test_stuck():\n    time.sleep(30)\n\ndef test_after():\n    pass\n"


def _pytest(tmp_path: Path, timeout: str | None) -> subprocess.CompletedProcess:
    # unset, the "stuck" test sleeps past the 1 s the other case allows, and must not be cut
    (tmp_path / "test_stuck.py").write_text(SLOW_THEN_FAST if timeout else SLOW_THEN_FAST.replace("30", "2"))
    env = {k: v for k, v in os.environ.items() if k != "SEQDSL_TEST_TIMEOUT"}
    if timeout:
        env["SEQDSL_TEST_TIMEOUT"] = timeout
    return subprocess.run([sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider", "-p", "tests.conftest",
                           str(tmp_path / "test_stuck.py")], cwd=ROOT, env=env, capture_output=True, text=True,
                          timeout=120)


def test_a_stuck_test_fails_after_the_timeout_and_the_next_one_runs(tmp_path):
    run = _pytest(tmp_path, "1")
    assert "1 failed, 1 passed" in run.stdout, run.stdout + run.stderr
    assert "still running after SEQDSL_TEST_TIMEOUT=1 s" in run.stdout


def test_without_the_variable_nothing_is_interrupted(tmp_path):
    run = _pytest(tmp_path, None)
    assert "2 passed" in run.stdout, run.stdout + run.stderr
