"""The wheel ships what the installed package needs: the grammar (read at run time by the
parser) and the top-level codegen/ and kernels/ folders, mapped into the package as
seqdsl.codegen and seqdsl.kernels (pyproject.toml's package-dir)."""

from __future__ import annotations

import shutil
import subprocess
import sys
import zipfile
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
IGNORED = shutil.ignore_patterns(".git", "build", "dist", "*.egg-info", "__pycache__", ".hypothesis",
                                 ".pytest_cache", "runs", ".venv", "*.pyc")


@pytest.mark.slow
def test_wheel_contains_grammar_codegen_and_kernels(tmp_path):
    # Build from a copy, so the build's scratch folders never land in the working tree that
    # other people are editing.
    src = tmp_path / "src"
    shutil.copytree(ROOT, src, ignore=IGNORED)
    out = tmp_path / "dist"
    # pip is always there; `python -m build --no-isolation` would also insist on `wheel`, which
    # setuptools >= 70.1 no longer needs.
    cmd = [sys.executable, "-m", "pip", "wheel", "--no-deps", "--no-build-isolation",
           "--disable-pip-version-check", "--wheel-dir", str(out), str(src)]
    proc = subprocess.run(cmd, capture_output=True, text=True, timeout=300, cwd=tmp_path)
    assert proc.returncode == 0, proc.stdout[-2000:] + proc.stderr[-2000:]
    (wheel,) = out.glob("seqdsl-*.whl")
    names = set(zipfile.ZipFile(wheel).namelist())
    for required in ("seqdsl/grammar/seq.lark", "seqdsl/kernels/__init__.py",
                     "seqdsl/codegen/__init__.py", "seqdsl/check/registry.py",
                     "seqdsl/cli/check.py", "seqdsl/cli/explain.py"):
        assert required in names, f"{required} missing from {wheel.name}"
    assert not any(n.startswith(("kernels/", "codegen/", "grammar/", "tests/", "specs/")) for n in names)
    entry = next(n for n in names if n.endswith("entry_points.txt"))
    assert "seqdsl = seqdsl.cli.main:main" in zipfile.ZipFile(wheel).read(entry).decode()


def test_every_subpackage_is_listed_for_the_wheel():
    """pyproject.toml lists packages explicitly (for the package-dir mapping); a new
    subpackage that is not listed would be silently left out of the wheel."""
    import tomllib

    listed = set(tomllib.loads((ROOT / "pyproject.toml").read_text())["tool"]["setuptools"]["packages"])
    on_disk = {".".join(p.parent.relative_to(ROOT).parts) for p in (ROOT / "seqdsl").rglob("__init__.py")}
    assert on_disk <= listed, f"not in pyproject.toml's packages: {sorted(on_disk - listed)}"


def test_every_extra_that_installs_torch_installs_numpy():
    """torch's wheel does not depend on numpy but warns "Failed to initialize NumPy" on every
    import without it. `dev` counts: the README installs `torch==... -e ".[dev]"`. (Checked in a
    fresh venv with that exact command: the warning is gone once numpy is in `dev`.)"""
    import re
    import tomllib

    extras = tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]["optional-dependencies"]

    def names(reqs):
        return {re.split(r"[<>=!~\[; ]", r, maxsplit=1)[0].lower() for r in reqs}

    needs_numpy = [e for e, reqs in extras.items() if "torch" in names(reqs)] + ["dev"]
    assert {"torch", "gpu"} <= set(needs_numpy)
    for extra in needs_numpy:
        assert "numpy" in names(extras[extra]), f"extra `{extra}` installs torch without numpy"
    readme = (ROOT / "README.md").read_text()
    assert 'python3 -m pip install torch==2.13.0 -e ".[dev]"' in readme, "the install this test guards"
