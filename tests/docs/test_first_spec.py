"""docs/first_spec.md is run, not just read: every code block, in order, in an empty directory.

- ```seq FILE``` blocks are written to FILE (a later block with the same name replaces it);
- ```console``` blocks hold `$ seqdsl ...` commands, each followed by the output it must print
  (stdout and stderr together, in the order written; a line `...` stands for any lines);
- ```python``` blocks are executed in one namespace, in order.

A block of any other kind fails the test, so nothing in the walk-through goes unchecked.
"""

from __future__ import annotations

import contextlib
import io
import re
import shlex
from pathlib import Path

import pytest

from seqdsl.cli.main import main

DOC = Path(__file__).resolve().parents[2] / "docs" / "first_spec.md"
FENCE = re.compile(r"^```(\w+)[ \t]*(\S*)[ \t]*\n(.*?)^```[ \t]*$", re.S | re.M)


def blocks(text: str) -> list[tuple[str, str, str]]:
    """(language, argument, body) of every fenced block, in document order."""
    return [(m.group(1), m.group(2), m.group(3)) for m in FENCE.finditer(text)]


def console_steps(body: str) -> list[tuple[str, str]]:
    """[(command, expected output)] of a console block."""
    steps: list[tuple[str, list[str]]] = []
    for line in body.splitlines():
        if line.startswith("$ "):
            steps.append((line[2:], []))
        else:
            assert steps, f"output before any command in a console block: {line!r}"
            steps[-1][1].append(line)
    return [(cmd, "\n".join(out)) for cmd, out in steps]


def output_pattern(expected: str) -> re.Pattern:
    parts = []
    for line in expected.splitlines():
        parts.append(r"(?:[^\n]*\n)*" if line == "..." else re.escape(line.rstrip()) + r"\n")
    return re.compile("".join(parts))


def run_seqdsl(command: str) -> str:
    argv = shlex.split(command)
    assert argv[0] == "seqdsl", f"the walk-through runs only seqdsl commands: {command!r}"
    out = io.StringIO()  # one stream, as a terminal shows stdout and stderr interleaved
    with contextlib.redirect_stdout(out), contextlib.redirect_stderr(out):
        main(argv[1:])
    return "".join(line.rstrip() + "\n" for line in out.getvalue().splitlines())


def test_output_pattern_matches_lines_and_ellipsis():
    assert output_pattern("a\n...\nz").fullmatch("a\nb\nc\nz\n")
    assert output_pattern("a\n...\nz").fullmatch("a\nz\n")
    assert not output_pattern("a\nz").fullmatch("a\nb\nz\n")
    assert not output_pattern("a (b)").fullmatch("a b\n")


def test_blocks_and_steps_are_found():
    text = "x\n```seq a.seq\nmixer a {}\n```\n\n```console\n$ seqdsl check a.seq\nok\n$ seqdsl x\n```\n"
    assert blocks(text) == [("seq", "a.seq", "mixer a {}\n"), ("console", "", "$ seqdsl check a.seq\nok\n$ seqdsl x\n")]
    assert console_steps(blocks(text)[1][2]) == [("seqdsl check a.seq", "ok"), ("seqdsl x", "")]


def test_every_block_of_the_walk_through_runs_as_shown(tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    found = blocks(DOC.read_text(encoding="utf-8"))
    assert {lang for lang, _, _ in found} == {"seq", "console", "python"}
    namespace: dict = {"__name__": "first_spec"}
    for n, (lang, arg, body) in enumerate(found):
        where = f"{DOC.name}, block {n + 1} ({lang})"
        if lang == "seq":
            assert arg.endswith(".seq"), f"{where}: a seq block names its file"
            (tmp_path / arg).write_text(body, encoding="utf-8")
        elif lang == "console":
            for command, expected in console_steps(body):
                actual = run_seqdsl(command)
                assert output_pattern(expected).fullmatch(actual), (
                    f"{where}: `{command}` printed\n{actual}\ninstead of\n{expected}")
        elif lang == "python":
            exec(compile(body, where, "exec"), namespace)
        else:
            pytest.fail(f"{where}: unknown block kind {lang!r}")
