"""The per-cell lock: two processes never run one cell.

:class:`CellLock` (``.lock`` in the cell folder) is an exclusive ``flock`` (POSIX byte-range locks on NFS,
which Linux maps ``flock`` to) holding the owner's host and pid; the kernel releases it when its owner dies,
so a lock left by a killed process is detected as stale and taken over. On file systems without working
``flock`` (Lustre mounted ``noflock``) it falls back to an atomic ``O_EXCL`` create with host, pid and a
heartbeat: stale when the owner's pid is gone (same host) or its heartbeat is older than ``stale_after_s``
(other hosts). A lock file holding anything but an owner object (``[]``, ``null``, a torn write) names no
owner: it is stale as soon as nobody holds it. The lock file is only ever opened as a regular file
(:mod:`harness.results.cellfile`: no symbolic link followed, no FIFO waited on): anything else planted at
``.lock`` is no owner's lock, and is moved aside (``.lock.planted``) before the lock is taken.
"""
from __future__ import annotations

import errno
import fcntl
import json
import logging
import os
import socket
import time
from pathlib import Path

from harness.results import cellfile

LOCK = ".lock"
log = logging.getLogger("harness")


def _owner(text: str) -> dict:
    """The owner object a lock file holds; {} for anything else (empty, torn, ``[]``, ``null``, ...)."""
    try:
        owner = json.loads(text or "{}")
    except ValueError:
        return {}
    return owner if isinstance(owner, dict) else {}


class CellBusy(RuntimeError):
    """Another live process holds the cell's lock."""


def _pid_alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    return True


class CellLock:
    """Exclusive per-cell lock (see the module docstring). ``acquire()`` raises :class:`CellBusy`
    naming the owner when a live process holds it; ``release()`` removes it. Use as a context
    manager. ``mode``: "flock" (default; falls back to "excl" where flock is not supported) or "excl"."""

    def __init__(self, cell_dir: Path, mode: str = "flock", stale_after_s: float = 6 * 3600):
        self.cell_dir = Path(cell_dir)
        self.path = self.cell_dir / LOCK
        self.mode = mode
        self.stale_after_s = stale_after_s
        self._fd: int | None = None
        self.took_over: dict | None = None  # the stale owner a takeover replaced

    @staticmethod
    def owner_info() -> dict:
        return {"host": socket.gethostname(), "pid": os.getpid(), "since": time.time()}

    def _read_owner(self) -> dict:
        try:
            return _owner(cellfile.read_text(self.path))
        except (OSError, UnicodeDecodeError):
            return {}

    def _clear_planted(self) -> None:
        """A ``.lock`` that is not a regular file (a link, a FIFO) holds no owner: moved aside, by name."""
        what = cellfile.kind(self.path)
        if what not in ("missing", "file"):
            log.warning("cell %s: %s is a %s, not a lock file: moved aside as %s", self.cell_dir.name, LOCK, what,
                        cellfile.move_aside(self.path))

    def acquire(self) -> "CellLock":
        self.cell_dir.mkdir(parents=True, exist_ok=True)
        self._clear_planted()
        if self.mode == "flock":
            try:
                return self._acquire_flock()
            except OSError as e:
                if e.errno not in (errno.ENOSYS, errno.EOPNOTSUPP, errno.ENOLCK, errno.EINVAL):
                    raise
                log.warning("flock is not supported on %s (%s); using an O_EXCL lock file", self.cell_dir, e)
                self.mode = "excl"
                try:  # the empty file the flock attempt created is not an owner
                    if os.lstat(self.path).st_size == 0:
                        self.path.unlink()
                except FileNotFoundError:
                    pass
        return self._acquire_excl()

    def _acquire_flock(self) -> "CellLock":
        fd = cellfile.open_fd(self.path, os.O_RDWR | os.O_CREAT, 0o644)
        try:
            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            os.close(fd)
            owner = self._read_owner()
            raise CellBusy(f"cell {self.cell_dir.name} is being run by {owner.get('host', '?')} "
                           f"pid {owner.get('pid', '?')}") from None
        except OSError:
            os.close(fd)
            raise
        previous = self._read_owner()
        if previous and (previous.get("host"), previous.get("pid")) != (socket.gethostname(), os.getpid()):
            self.took_over = previous
            log.warning("cell %s: stale lock of %s pid %s (its process is gone) taken over", self.cell_dir.name,
                        previous.get("host"), previous.get("pid"))
        os.ftruncate(fd, 0)
        os.pwrite(fd, json.dumps(self.owner_info()).encode(), 0)
        os.fsync(fd)
        self._fd = fd
        return self

    def _excl_stale(self, owner: dict) -> bool:
        if not cellfile.is_file(self.path):
            return True  # planted (not a lock file) or gone
        if not owner:
            try:  # an empty or torn lock file: stale once it is older than a few seconds
                return time.time() - os.lstat(self.path).st_mtime > 10
            except FileNotFoundError:
                return True
        if owner.get("host") == socket.gethostname():
            pid = owner.get("pid")
            return not (isinstance(pid, int) and _pid_alive(pid))
        try:
            return time.time() - os.lstat(self.path).st_mtime > self.stale_after_s
        except FileNotFoundError:
            return True

    def _acquire_excl(self) -> "CellLock":
        for _ in range(3):
            try:
                fd = os.open(self.path, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o644)
            except FileExistsError:
                owner = self._read_owner()
                if not self._excl_stale(owner):
                    raise CellBusy(f"cell {self.cell_dir.name} is being run by {owner.get('host', '?')} "
                                   f"pid {owner.get('pid', '?')}") from None
                # break the stale lock: only one breaker's rename of this exact file succeeds
                aside = self.cell_dir / f".lock.stale.{os.getpid()}"
                try:
                    os.rename(self.path, aside)
                except FileNotFoundError:
                    continue
                self.took_over = owner
                log.warning("cell %s: stale lock of %s pid %s taken over", self.cell_dir.name,
                            owner.get("host"), owner.get("pid"))
                aside.unlink(missing_ok=True)
                continue
            os.write(fd, json.dumps(self.owner_info()).encode())
            os.fsync(fd)
            self._fd = fd
            return self
        raise CellBusy(f"cell {self.cell_dir.name}: could not take its lock")

    def heartbeat(self) -> None:
        """Refresh the lock's mtime (the excl mode's liveness signal on other hosts)."""
        if self._fd is not None:
            try:
                os.utime(self._fd)  # the file this process holds, never through a name
            except OSError:
                pass

    def release(self) -> None:
        if self._fd is None:
            return
        try:
            if self.mode == "flock":
                # the file is never unlinked (a process that opened it must lock the same inode); an empty
                # file means "released cleanly", a non-empty unlocked one was left by a process that died
                os.ftruncate(self._fd, 0)
                fcntl.flock(self._fd, fcntl.LOCK_UN)
            else:
                self.path.unlink(missing_ok=True)
        finally:
            os.close(self._fd)
            self._fd = None

    def __enter__(self):
        return self.acquire()

    def __exit__(self, *exc):
        self.release()


def lock_state(cell_dir: Path) -> dict | None:
    """The owner of a cell's lock if a live process holds it (for ``harness plan``), else None."""
    path = Path(cell_dir) / LOCK
    try:
        fd = cellfile.open_fd(path, os.O_RDONLY)
    except OSError:  # missing, or planted (a link, a FIFO): nobody's lock
        return None
    try:
        fcntl.flock(fd, fcntl.LOCK_SH | fcntl.LOCK_NB)
        fcntl.flock(fd, fcntl.LOCK_UN)
        return None  # nobody holds it: a stale file
    except BlockingIOError:
        try:
            return _owner(os.pread(fd, 4096, 0).decode("utf-8")) or {"host": "?", "pid": "?"}
        except (OSError, UnicodeDecodeError):
            return {"host": "?", "pid": "?"}
    except OSError:
        return None
    finally:
        os.close(fd)
