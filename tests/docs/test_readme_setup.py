"""The README's set-up block is what CI runs (.ci/run reads it through .ci/readme_commands.py):
its shape, and that the install it states is the one users get (no constraints file, torch pinned
to the CPU wheel, the dev extra)."""

from __future__ import annotations

from pathlib import Path

import pytest

from tests.docs_generator import load_script

ROOT = Path(__file__).resolve().parents[2]


def _readme_commands():
    return load_script(".ci/readme_commands.py", "readme_commands")


def test_readme_set_up_is_two_commands_install_then_tests():
    install, test = _readme_commands().setup_commands((ROOT / "README.md").read_text(encoding="utf-8"))
    assert install.startswith("python3 -m pip install torch==2.13.0 -e \".[dev]\"")
    assert "-c " not in install.split("&&")[0], "the README's install must be the one CI runs: no constraints file"
    assert test.startswith("python3 -m pytest")


def test_ci_runs_the_readme_commands_not_its_own():
    ci = (ROOT / ".ci" / "run").read_text(encoding="utf-8")
    assert "readme_commands.py install" in ci and "readme_commands.py test" in ci
    assert "pip install" not in ci.replace("pip install -q --upgrade pip", ""), \
        ".ci/run must install only through the README's command"


@pytest.mark.parametrize("text, error", [
    ("# x\n## Set-up\nno block\n## Next\n", "no fenced"),
    ("# x\n## Set-up\n```\none\n```\n## Next\n", "exactly two"),
    ("# x\n## Other\n", "no '## Set-up'"),
])
def test_readme_parser_refuses_a_set_up_of_another_shape(text, error):
    with pytest.raises(SystemExit, match=error):
        _readme_commands().setup_commands(text)
