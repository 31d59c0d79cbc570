"""Opening files in a cell folder safely: whatever was planted there, the harness reads or writes only
regular files, never through a symbolic link, and never waits on a FIFO or a device.

Every open adds ``O_NOFOLLOW`` (a symbolic link fails: a ``.lock`` or ``records.partial.jsonl`` pointing
outside is never truncated or written through), ``O_NONBLOCK`` (a FIFO or device opens at once instead
of hanging; a regular file ignores it) and ``O_CLOEXEC``, then checks the type with ``fstat`` before
anything is read or written: anything but a regular file raises :class:`NotARegularFile`, and the
cell is treated as corrupt (its planted entry is moved aside by name, never opened). ``O_TRUNC`` is
never passed to ``open``: truncation happens after the type check. Standard library only (imported by
the lock and the store).
"""
from __future__ import annotations

import errno
import json
import math
import os
import stat
import tempfile
from pathlib import Path

_SAFE = os.O_NOFOLLOW | os.O_NONBLOCK | os.O_CLOEXEC


class NotARegularFile(OSError):
    """A cell folder's entry is a symbolic link, FIFO, device, socket or folder where a file belongs."""


def kind(path: Path) -> str:
    """What ``path`` is without following it: "missing", "file" or the other type's name."""
    try:
        mode = os.lstat(path).st_mode
    except FileNotFoundError:
        return "missing"
    for test, name in ((stat.S_ISREG, "file"), (stat.S_ISLNK, "symbolic link"), (stat.S_ISFIFO, "FIFO"),
                       (stat.S_ISDIR, "folder"), (stat.S_ISSOCK, "socket"), (stat.S_ISCHR, "device"),
                       (stat.S_ISBLK, "device")):
        if test(mode):
            return name
    return "special file"


def open_fd(path: Path, flags: int, mode: int = 0o644) -> int:
    """``os.open`` of a regular file only (see the module docstring); ``O_TRUNC`` in ``flags`` is applied
    after the type check. FileNotFoundError passes through."""
    truncate = flags & os.O_TRUNC
    try:
        fd = os.open(path, (flags & ~os.O_TRUNC) | _SAFE, mode)
    except OSError as e:
        if e.errno in (errno.ELOOP, errno.ENXIO, errno.EISDIR, errno.ENODEV):
            raise NotARegularFile(errno.ELOOP, f"{path} is a {kind(Path(path))}, not a regular file") from None
        raise
    try:
        if not stat.S_ISREG(os.fstat(fd).st_mode):
            raise NotARegularFile(errno.ELOOP, f"{path} is a {kind(Path(path))}, not a regular file")
        os.set_blocking(fd, True)
        if truncate:
            os.ftruncate(fd, 0)
    except BaseException:
        os.close(fd)
        raise
    return fd


def read_bytes(path: Path) -> bytes:
    with os.fdopen(open_fd(path, os.O_RDONLY), "rb") as f:
        return f.read()


def read_text(path: Path) -> str:
    return read_bytes(path).decode("utf-8")


def open_file(path: Path, mode: str, encoding: str | None = "utf-8"):
    """A Python file object for ``mode`` in "r", "rb", "w", "a", "r+b" (text modes with ``encoding``)."""
    flags = {"r": os.O_RDONLY, "w": os.O_WRONLY | os.O_CREAT | os.O_TRUNC, "a": os.O_WRONLY | os.O_CREAT | os.O_APPEND,
             "r+": os.O_RDWR}[mode.replace("b", "")]
    fd = open_fd(path, flags)
    try:
        return os.fdopen(fd, mode, encoding=None if "b" in mode else encoding)
    except BaseException:
        os.close(fd)
        raise


def is_file(path: Path) -> bool:
    """A regular file, not followed through a link (``Path.is_file`` follows)."""
    return kind(path) == "file"


def move_aside(path: Path, suffix: str = ".planted") -> str:
    """Rename a non-regular entry out of the way (the link or FIFO itself, not what it points to);
    returns its new name."""
    target = Path(path).with_name(Path(path).name + suffix)
    os.replace(path, target)
    return target.name


def atomic_write_text(path: Path, text: str) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    fd, tmp = tempfile.mkstemp(dir=path.parent, prefix=f".{path.name}.", suffix=".tmp")
    try:
        with os.fdopen(fd, "w", encoding="utf-8") as f:
            f.write(text)
            f.flush()
            os.fsync(f.fileno())
        os.replace(tmp, path)
    except BaseException:
        Path(tmp).unlink(missing_ok=True)
        raise


def atomic_write_bytes(path: Path, data: bytes) -> None:
    fd, tmp = tempfile.mkstemp(dir=path.parent, prefix=f".{path.name}.", suffix=".tmp")
    try:
        with os.fdopen(fd, "wb") as f:
            f.write(data)
            os.fsync(f.fileno())
        os.replace(tmp, path)
    except BaseException:
        Path(tmp).unlink(missing_ok=True)
        raise


def fsync_dir(path: Path) -> None:
    try:
        fd = os.open(path, os.O_RDONLY)
    except OSError:
        return
    try:
        os.fsync(fd)
    except OSError:  # not every file system syncs a folder
        pass
    os.close(fd)


def _json_default(o):
    if hasattr(o, "item"):
        return o.item()
    if isinstance(o, Path):
        return str(o)
    raise TypeError(f"not JSON serialisable: {type(o).__name__}")


def dumps(obj) -> str:
    """JSON with NaN/inf written as null (strict JSON readers and parquet both accept that)."""
    return json.dumps(_finite(obj), default=_json_default, ensure_ascii=False)


def _finite(o):
    if isinstance(o, dict):
        return {k: _finite(v) for k, v in o.items()}
    if isinstance(o, (list, tuple)):
        return [_finite(v) for v in o]
    return None if isinstance(o, float) and not math.isfinite(o) else o
