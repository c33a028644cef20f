"""The wheel a user installs: every data file the package reads at run time is in it (the kernel
templates, the grammar, the shipped autotuning records), and building it gives no setuptools
warning about folders it "would ignore" (a folder with an importable name that is not a listed
package: the install printed some 900 lines of them before 2026-12-07)."""

from __future__ import annotations

import shutil
import subprocess
import sys
import zipfile
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
SOURCES = ("pyproject.toml", "README.md", "seqdsl", "grammar", "codegen", "kernels")


def _files(folder: Path, pattern: str) -> set[str]:
    return {p.relative_to(folder).as_posix() for p in folder.glob(pattern) if p.is_file()}


@pytest.mark.slow
def test_the_wheel_holds_every_data_file_and_builds_without_warnings(tmp_path):
    pytest.importorskip("setuptools")
    src = tmp_path / "src"
    src.mkdir()
    for name in SOURCES:  # a copy, so that the build writes nothing into the checkout
        if (ROOT / name).is_dir():
            shutil.copytree(ROOT / name, src / name, ignore=shutil.ignore_patterns("__pycache__", "*.egg-info"))
        else:
            shutil.copy2(ROOT / name, src / name)
    built = subprocess.run(
        [sys.executable, "-m", "pip", "wheel", "--no-deps", "--no-build-isolation", "-w", str(tmp_path / "dist"),
         str(src)], capture_output=True, text=True, timeout=300)
    assert built.returncode == 0, built.stderr[-2000:]
    log = built.stdout + built.stderr
    assert "would be ignored" not in log and "absent from the `packages` configuration" not in log
    (wheel,) = (tmp_path / "dist").glob("seqdsl-*.whl")
    names = set(zipfile.ZipFile(wheel).namelist())
    expected = (
        {f"seqdsl/codegen/templates/{n}" for n in _files(ROOT / "codegen" / "templates", "*.jinja")}
        | {f"seqdsl/grammar/{n}" for n in _files(ROOT / "grammar", "*.lark")}
        | {f"seqdsl/lower/backends/autotune-seed/{n}"
           for n in _files(ROOT / "seqdsl" / "lower" / "backends" / "autotune-seed", "**/*")}
    )
    assert len(expected) > 30  # templates, the grammar, the tuning records (not a vacuous check)
    assert expected <= names, sorted(expected - names)
