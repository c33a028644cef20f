"""Print one of the README's two set-up commands: `install` (install + main job) or `test`.

The README's "Set-up" section holds one fenced block with exactly two lines: the command that
installs seqdsl and runs the main job, then the test command. CI runs them as written, so the
README's promise is what CI checks. tests/docs/test_readme_setup.py holds this parser to that
shape.
"""

from __future__ import annotations

import re
import sys
from pathlib import Path

README = Path(__file__).resolve().parent.parent / "README.md"


def setup_commands(text: str) -> tuple[str, str]:
    """(install-and-main-job, test) from the README's "## Set-up" section's first fenced block."""
    section = re.search(r"^## Set-up\n(.*?)(?=^## )", text, re.S | re.M)
    if section is None:
        raise SystemExit("README.md has no '## Set-up' section")
    block = re.search(r"^```[^\n]*\n(.*?)^```", section.group(1), re.S | re.M)
    if block is None:
        raise SystemExit("README.md's Set-up section has no fenced command block")
    lines = [line.strip() for line in block.group(1).splitlines() if line.strip()]
    if len(lines) != 2:
        raise SystemExit(f"README.md's Set-up block must hold exactly two commands, found {len(lines)}")
    return lines[0], lines[1]


if __name__ == "__main__":
    which = sys.argv[1] if len(sys.argv) > 1 else ""
    install, test = setup_commands(README.read_text(encoding="utf-8"))
    if which == "install":
        print(install)
    elif which == "test":
        print(test)
    else:
        raise SystemExit("usage: readme_commands.py install|test")
