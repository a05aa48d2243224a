"""Files a user keeps (traces, sessions, presets, exports) are written atomically: to a temporary file beside the
target, flushed and fsynced, then renamed over it, so a reader sees the old file or the whole new one. One
implementation for every writer; what goes in the file is the caller's. Each kind of file starts with a header
naming its format and version, checked by `check_header` when read.
"""

from __future__ import annotations

import contextlib
import os
import tempfile
from collections.abc import Iterable
from pathlib import Path


def write_atomic(path: str | os.PathLike, data: str | bytes) -> None:
    """Write `data` (text as UTF-8) atomically."""
    write_chunks(path, [data.encode("utf-8") if isinstance(data, str) else data])


def write_lines(path: str | os.PathLike, lines: Iterable[str]) -> None:
    """Write each of `lines` (no newline of their own) atomically, streamed rather than joined in memory."""
    write_chunks(path, ((line + "\n").encode("utf-8") for line in lines))


def write_chunks(path: str | os.PathLike, chunks: Iterable[bytes]) -> None:
    path = Path(path)
    fd, tmp = tempfile.mkstemp(dir=path.parent, prefix=f".{path.name}.", suffix=".tmp")
    try:
        with os.fdopen(fd, "wb") as f:
            for chunk in chunks:
                f.write(chunk)
            f.flush()
            os.fsync(f.fileno())
        os.chmod(tmp, 0o644)  # mkstemp makes it private; this is an ordinary user file
        os.replace(tmp, path)
    except BaseException:
        with contextlib.suppress(OSError):
            os.unlink(tmp)
        raise
    with contextlib.suppress(OSError):  # the rename survives a crash once the folder is synced (POSIX)
        dir_fd = os.open(path.parent, os.O_RDONLY)
        try:
            os.fsync(dir_fd)
        finally:
            os.close(dir_fd)


def check_header(obj: object, fmt: str, version: int, kind: str, error: type[Exception]) -> None:
    """Raise `error` unless `obj` is a header of format `fmt` at `version` or older: a file of another kind, or
    one a newer Logit Lab wrote, is refused with a message that says which and what to do."""
    if not isinstance(obj, dict) or obj.get("format") != fmt:
        raise error(f"not a Logit Lab {kind} file (no {kind} header)")
    found = obj.get("version")
    if not isinstance(found, int) or found > version:
        raise error(f"written by a newer Logit Lab ({kind} format {found}; this one reads up to {version}): "
                    f"update Logit Lab to open it")
