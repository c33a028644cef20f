"""The figures the README quotes about its own two commands, measured: one source for them.

    python benchmarks/readme_figures.py            # the main job (check, train, compare), timed
    python benchmarks/readme_figures.py --suite    # and the test suite, whole and fast

Runs the README's main job after the install (the second half of its first set-up command, read
out of README.md by .ci/readme_commands.py) in a temporary folder, then optionally the test
command and its fast variant, and writes benchmarks/results/readme_figures_cpu.json: the date,
the machine, the main job's wall time and its final losses per domain, the suite's counts and
times. tests/docs/test_readme_figures.py holds README.md's numbers to this file, so the README
cannot quote a figure nobody measured (rerun this after a change that moves them).
"""

from __future__ import annotations

import datetime
import json
import os
import platform
import re
import shutil
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
OUT = ROOT / "benchmarks" / "results" / "readme_figures_cpu.json"
FIGURE_TESTS = "tests/docs/test_readme_figures.py"
sys.path.insert(0, str(ROOT / ".ci"))

from readme_commands import setup_commands  # noqa: E402


def main_job(workdir: Path) -> dict:
    """The main job as the README writes it (after the install), in `workdir`: its wall time and
    the final evaluation's losses."""
    install_and_job, _ = setup_commands((ROOT / "README.md").read_text(encoding="utf-8"))
    job = install_and_job.split("&&", 1)[1].strip()
    for folder in ("specs", "recipes"):
        shutil.copytree(ROOT / folder, workdir / folder)
    t0 = time.perf_counter()
    proc = subprocess.run(["bash", "-c", job], cwd=workdir, capture_output=True, text=True)
    wall = time.perf_counter() - t0
    if proc.returncode != 0:
        raise SystemExit(f"the README's main job failed:\n{proc.stdout[-2000:]}{proc.stderr[-2000:]}")
    run = next((workdir / "runs").iterdir())
    rows = [json.loads(line) for line in (run / "metrics.jsonl").read_text().splitlines()]
    last = max(r["step"] for r in rows if r["kind"] == "eval")
    losses = {r["domain"]: round(r["loss"], 3) for r in rows if r["kind"] == "eval" and r["step"] == last}
    return {"command": job, "wall_s": round(wall, 1), "final_step": last, "final_losses": losses}


def suite(marker: str | None) -> dict:
    _, test = setup_commands((ROOT / "README.md").read_text(encoding="utf-8"))
    command = test + (f' -m "{marker}"' if marker else "")
    # the checks of these very figures are left out: they compare the README with the figures of
    # the previous measurement, which this one is about to replace
    command += f" --ignore={FIGURE_TESTS}"
    t0 = time.perf_counter()
    proc = subprocess.run(["bash", "-c", command], cwd=ROOT, capture_output=True, text=True,
                          env=dict(os.environ, CI="true"))
    wall = time.perf_counter() - t0
    log = Path(tempfile.gettempdir()) / f"readme_figures_{'fast_' if marker else ''}suite.log"
    log.write_text(proc.stdout + proc.stderr)  # the whole output, for a red run's failures
    last = proc.stdout.strip().splitlines()[-1] if proc.stdout.strip() else ""
    counts = {k: int(v) for v, k in re.findall(r"(\d+) (passed|failed|skipped|deselected|error)", last)}
    failures = re.findall(r"^(?:FAILED|ERROR) (\S+)", proc.stdout, flags=re.M)
    return {"command": command, "wall_s": round(wall, 1), "counts": counts, "summary": last, "failures": failures}


def main(argv: list[str] | None = None) -> int:
    argv = sys.argv[1:] if argv is None else argv
    record = {"date": datetime.date.today().isoformat(), "machine": f"{os.cpu_count()} cores, {platform.machine()}, "
              f"Python {platform.python_version()}"}
    with tempfile.TemporaryDirectory() as tmp:
        record["main_job"] = main_job(Path(tmp))
    print(json.dumps(record["main_job"], indent=2))
    if "--suite" in argv:
        record["suite"] = suite(None)
        record["fast_suite"] = suite("not slow")
        print(record["suite"]["summary"], "|", record["fast_suite"]["summary"])
        failed = record["suite"]["failures"] + record["fast_suite"]["failures"]
        if failed:  # the README quotes a green suite's figures, never a red one's
            print("not written: the suite is red:\n  " + "\n  ".join(failed))
            return 1
    elif OUT.exists():  # keep the last suite figures when only the main job was rerun
        old = json.loads(OUT.read_text())
        record.update({k: old[k] for k in ("suite", "fast_suite") if k in old})
    OUT.write_text(json.dumps(record, indent=2) + "\n")
    print(f"wrote {OUT}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
