"""Whole-file writes that a kill cannot leave half done.

`write_atomic` writes beside the file (same directory, so the rename is atomic on POSIX) and
renames the temporary file over it: a reader sees the old contents or the new, never a mix, and a
process killed mid-write leaves at most a stray `.NAME.*.tmp`. Every record, cache entry and
pointer that seqdsl rewrites in place goes through it (checkpoints, which are directories, are
renamed whole by seqdsl/run/checkpoint.py).
"""

from __future__ import annotations

import contextlib
import os
import tempfile
from pathlib import Path


def _umask() -> int:
    mask = os.umask(0)
    os.umask(mask)
    return mask


_NEW_FILE_MODE = 0o666 & ~_umask()  # read once, at import: os.umask cannot be read without setting it


def write_atomic(path: str | Path, data: str | bytes, *, durable: bool = False) -> None:
    """Replace `path`'s contents with `data` (text as UTF-8) in one step. A symlink is written
    through (its target is replaced, the link stays); an existing file keeps its permission bits,
    a new one gets the umask's (mkstemp alone would leave 0600). `durable`: fsync the data before
    the rename, so that after a power cut the new name never points at unwritten blocks. On any
    failure the temporary file is removed and the error raised (an OSError for the caller's
    message)."""
    target = Path(path).resolve()
    try:
        mode = os.stat(target).st_mode & 0o7777
    except FileNotFoundError:
        mode = _NEW_FILE_MODE
    fd, tmp = tempfile.mkstemp(dir=target.parent, prefix=f".{target.name}.", suffix=".tmp")
    try:
        with os.fdopen(fd, "wb") as f:
            f.write(data.encode("utf-8") if isinstance(data, str) else data)
            if durable:
                f.flush()
                os.fsync(f.fileno())
        os.chmod(tmp, mode)
        os.replace(tmp, target)
    except BaseException:
        with contextlib.suppress(OSError):
            os.unlink(tmp)
        raise
