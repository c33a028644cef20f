"""README.md's figures about its own commands come from one measured file,
benchmarks/results/readme_figures_cpu.json (written by benchmarks/readme_figures.py): the main
job's time and final losses, the suite's counts and times. A figure edited by hand, or a file
rewritten without updating the README, fails here."""

from __future__ import annotations

import json
import re
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
FIGURES = json.loads((ROOT / "benchmarks" / "results" / "readme_figures_cpu.json").read_text())


def _setup_text() -> str:
    readme = (ROOT / "README.md").read_text(encoding="utf-8")
    return re.search(r"^## Set-up\n(.*?)(?=^## )", readme, re.S | re.M).group(1)


def _seconds(wall_s: float) -> str:
    minutes, seconds = divmod(round(wall_s), 60)
    return f"{minutes} min {seconds} s" if minutes else f"{seconds} s"


def test_the_main_job_figures_are_the_measured_ones():
    text, job = _setup_text(), FIGURES["main_job"]
    assert f"{_seconds(job['wall_s'])} after the install" in text
    losses = ", ".join(f"{domain} {loss:.3f}" for domain, loss in job["final_losses"].items())
    assert f"final losses {losses}" in text
    assert FIGURES["date"] in text


def test_the_suite_figures_are_the_measured_ones():
    text = _setup_text()
    for key in ("suite", "fast_suite"):
        run = FIGURES[key]
        assert f"{run['counts']['passed']:,} tests in {_seconds(run['wall_s'])}" in text, key
    assert f"{FIGURES['suite']['counts'].get('skipped', 0)} GPU-only tests skip" in text
    assert not FIGURES["suite"]["counts"].get("failed") and not FIGURES["fast_suite"]["counts"].get("failed"), \
        "the figures are a green suite's"


def test_the_figures_file_names_its_commands_as_the_readme_writes_them():
    text = (ROOT / "README.md").read_text(encoding="utf-8")
    assert FIGURES["main_job"]["command"] in text
    assert FIGURES["suite"]["command"].startswith("python3 -m pytest")
