"""JSON-lines record files (metrics.jsonl, probe.jsonl) that survive a process killed mid-write.

A process killed while writing leaves at most its last line cut short. Reading skips that line
and says so; a broken line anywhere else is a real error. Appending first drops it (it never was
a record, and what comes after must not join it), so the file reads whole again.
"""

from __future__ import annotations

import json
import os
from collections.abc import Callable
from pathlib import Path

from seqdsl.atomic import write_atomic
from seqdsl.errors import SeqFileError

_TAIL_BLOCK = 4096  # bytes read at a time from the end, looking for the last line's start


def read(path: str | Path) -> tuple[list[tuple[int, dict]], str | None]:
    """(line number, record) for every JSON object in the file, and a note when a cut last line
    was skipped. A missing file raises FileNotFoundError (callers word it); an unreadable one or a
    broken line before the last, SeqFileError."""
    path = Path(path)
    try:
        lines = path.read_bytes().rstrip(b"\n").split(b"\n")
    except FileNotFoundError:
        raise
    except OSError as err:
        raise SeqFileError(f"cannot read {path}: {err.strerror or err}") from None
    records, note = [], None
    for number, line in enumerate(lines, 1):
        if not line.strip():
            continue
        try:  # decoded line by line: a kill can cut a character's UTF-8 bytes in two
            record = json.loads(line.decode("utf-8"))
            if not isinstance(record, dict):
                raise ValueError("not a JSON object")
        except ValueError as err:
            if number == len(lines):
                note = f"{path}:{number}: skipped a truncated last line (the writer was killed mid-write?)"
                continue
            raise SeqFileError(f"{path}:{number}: not a JSON record ({err})") from None
        records.append((number, record))
    return records, note


def drop_cut_line(path: str | Path) -> bool:
    """End the file with a whole record: a last line that is not one is cut off (and one that
    lacks only its newline gets it). Whether a line was cut off. Reads only the file's tail."""
    path = Path(path)
    try:
        with open(path, "rb+") as f:
            size = f.seek(0, os.SEEK_END)
            if size == 0:
                return False
            f.seek(size - 1)
            if f.read(1) == b"\n":
                return False
            start, tail = size, b""
            while start > 0 and b"\n" not in tail:
                block = min(_TAIL_BLOCK, start)
                start -= block
                f.seek(start)
                tail = f.read(block) + tail
            line_start = start + tail.rfind(b"\n") + 1  # 0 when the file is one line
            f.seek(line_start)
            last = f.read()
            try:
                whole = isinstance(json.loads(last), dict)
            except ValueError:  # JSONDecodeError, or bytes that are not UTF-8
                whole = False
            if whole:
                f.seek(size)
                f.write(b"\n")
                return False
            f.truncate(line_start)
            return True
    except FileNotFoundError:
        return False
    except OSError as err:
        raise SeqFileError(f"cannot repair {path}: {err.strerror or err}") from None


def append(path: str | Path, records: list[dict]) -> bool:
    """Append records as JSON lines, flushed and fsynced, after dropping a cut last line (see
    `drop_cut_line`); whether one was dropped."""
    path = Path(path)
    dropped = drop_cut_line(path)
    try:
        with open(path, "a", encoding="utf-8") as f:
            for record in records:
                f.write(json.dumps(record) + "\n")
            f.flush()
            os.fsync(f.fileno())
    except OSError as err:
        raise SeqFileError(f"cannot append to {path}: {err.strerror or err}") from None
    return dropped


def keep_only(path: str | Path, keep: Callable[[dict], bool]) -> int:
    """Rewrite the file with the records `keep` accepts, in order, a cut last line dropped; a
    temporary file replaces it whole, so a kill leaves the old file or the new one. How many
    records were dropped (0 when the file does not exist)."""
    path = Path(path)
    try:
        records, _ = read(path)
    except FileNotFoundError:
        return 0
    kept = [record for _, record in records if keep(record)]
    try:
        write_atomic(path, "".join(json.dumps(record) + "\n" for record in kept))
    except OSError as err:
        raise SeqFileError(f"cannot rewrite {path}: {err.strerror or err}") from None
    return len(records) - len(kept)
