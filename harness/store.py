"""Crash-safe result files: every file appears whole (write to a temp file, fsync, rename) or not at all.

A cell directory holds ``records.jsonl`` (one record per prompt) and ``summary.json``; the
summary is written last and marks the cell finished, so a rerun skips it. The summary stores the
record count and a SHA-256 of ``records.jsonl``; a rerun verifies them before skipping
(:func:`finished_state`), and a cell whose records were later truncated or edited is repaired
(its complete records kept, the rest rerun), never skipped silently.

While a cell runs, each prompt's record is appended to ``records.partial.jsonl`` (one line, flushed
and fsynced, so a kill loses at most the prompt in flight). A killed cell is resumed at prompt
granularity: :meth:`RecordWriter.resume` keeps every complete line, drops a torn last line, and the
runner continues with the next prompt. ``records.partial.jsonl`` is never read as results.

Two processes never run one cell: :class:`CellLock` (``.lock`` in the cell folder) is an exclusive
``flock`` (POSIX byte-range locks on NFS, which Linux maps ``flock`` to) holding the owner's host and
pid; the kernel releases it when its owner dies, so a lock left by a killed process is detected as
stale and taken over. On file systems without working ``flock`` (Lustre mounted ``noflock``) it
falls back to an atomic ``O_EXCL`` create with host, pid and a heartbeat: stale when the owner's pid
is gone (same host) or its heartbeat is older than ``stale_after_s`` (other hosts).
"""
from __future__ import annotations

import errno
import fcntl
import hashlib
import json
import logging
import math
import os
import socket
import tempfile
import time
from pathlib import Path

SUMMARY = "summary.json"
RECORDS = "records.jsonl"
PARTIAL = "records.partial.jsonl"
ERROR = "error.json"
LOCK = ".lock"
log = logging.getLogger("harness")


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
    if isinstance(o, float) and not math.isfinite(o):
        return None
    if isinstance(o, dict):
        return {k: _finite(v) for k, v in o.items()}
    if isinstance(o, (list, tuple)):
        return [_finite(v) for v in o]
    return o


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


def atomic_write_json(path: Path, obj) -> None:
    atomic_write_text(path, json.dumps(_finite(obj), default=_json_default, indent=2, ensure_ascii=False) + "\n")


class RecordWriter:
    """Appends one record per prompt to the partial file (each line written whole with one
    ``write``, flushed and fsynced), then publishes them atomically as ``records.jsonl`` with
    :meth:`commit`. ``RecordWriter(cell_dir)`` starts the cell afresh; :meth:`resume` keeps the
    complete records a killed run left."""

    def __init__(self, cell_dir: Path, resume: bool = False):
        self.cell_dir = cell_dir
        cell_dir.mkdir(parents=True, exist_ok=True)
        self.partial = cell_dir / PARTIAL
        self.records: list[dict] = []
        if resume:
            self.records = recover_partial(cell_dir)
        self._f = self.partial.open("a" if resume else "w", encoding="utf-8")

    @classmethod
    def resume(cls, cell_dir: Path) -> "RecordWriter":
        return cls(cell_dir, resume=True)

    @property
    def next_index(self) -> int:
        return len(self.records)

    def write(self, record: dict) -> None:
        if record.get("index") != len(self.records):
            raise ValueError(f"record index {record.get('index')} written out of order (expected {len(self.records)})")
        line = dumps(record)
        self._f.write(line + "\n")
        self._f.flush()
        os.fsync(self._f.fileno())
        self.records.append(record)

    def commit(self) -> Path:
        self._f.flush()
        os.fsync(self._f.fileno())
        self._f.close()
        final = self.cell_dir / RECORDS
        os.replace(self.partial, final)
        _fsync_dir(self.cell_dir)
        return final

    def abort(self) -> None:
        if not self._f.closed:
            self._f.close()


def _fsync_dir(path: Path) -> None:
    try:
        fd = os.open(path, os.O_RDONLY)
    except OSError:
        return
    try:
        os.fsync(fd)
    except OSError:
        pass
    finally:
        os.close(fd)


def _parse_prefix(data: bytes, source: Path) -> tuple[list[dict], int]:
    """The complete, well-formed records at the start of ``data`` whose indices run 0, 1, 2, ...;
    returns (records, byte length of that prefix). Stops at a torn or malformed line (bad JSON or
    bytes that are not UTF-8)."""
    records, good = [], 0
    pos = 0
    while pos < len(data):
        nl = data.find(b"\n", pos)
        if nl < 0:
            log.warning("%s: dropping a torn last line (%d bytes) left by a kill", source, len(data) - pos)
            break
        line = data[pos:nl]
        try:
            rec = json.loads(line) if line.strip() else None
        except ValueError:
            log.warning("%s: dropping a malformed line %d and everything after it", source, len(records) + 1)
            break
        if rec is not None:
            if not isinstance(rec, dict) or rec.get("index") != len(records) or \
                    rec.get("cell_id") != source.parent.name:
                log.warning("%s: line %d is not record %d of this cell; dropping it and everything after it",
                            source, len(records) + 1, len(records))
                break
            records.append(rec)
        pos = nl + 1
        good = pos
    return records, good


_TEXT_SUFFIXES = ("reason", "source", "mode", "label", "basis", "error", "text", "prompt", "id", "category")


def _restore_nan(record: dict) -> dict:
    """A record read back from JSON with NaN restored where :func:`dumps` wrote null for it (numeric
    fields), so a resumed cell summarises the same values as an uninterrupted one."""
    return {k: (math.nan if v is None and not k.endswith(_TEXT_SUFFIXES) else v) for k, v in record.items()}


def recover_partial(cell_dir: Path) -> list[dict]:
    """Make ``records.partial.jsonl`` hold exactly its complete records 0..k-1 (a torn last line or
    a corrupted tail is cut off) and return them. A ``records.jsonl`` without a summary (a kill
    between publishing the records and writing the summary) is taken back as the partial file."""
    partial, final = cell_dir / PARTIAL, cell_dir / RECORDS
    if not partial.exists() and final.exists() and not (cell_dir / SUMMARY).exists():
        os.replace(final, partial)
    if not partial.exists():
        return []
    raw = partial.read_bytes()
    records, good = _parse_prefix(raw, partial)
    records = [_restore_nan(r) for r in records]
    if good != len(raw):
        with partial.open("r+b") as f:
            f.truncate(good)
            f.flush()
            os.fsync(f.fileno())
    return records


def records_digest(path: Path) -> tuple[int, str]:
    """(number of records, SHA-256 hex of the file's bytes) of a ``records.jsonl``."""
    data = path.read_bytes()
    return sum(1 for line in data.split(b"\n") if line.strip()), hashlib.sha256(data).hexdigest()


def is_finished(cell_dir: Path) -> bool:
    return (cell_dir / SUMMARY).is_file()


def finished_state(cell_dir: Path) -> tuple[str, str]:
    """("done" | "corrupt" | "none", detail). "done": the summary exists and ``records.jsonl`` has
    the record count and checksum it stores (older summaries without a checksum: the count of
    parseable records equals ``prompts``). "corrupt": a summary whose records do not match."""
    summary_path, records_path = cell_dir / SUMMARY, cell_dir / RECORDS
    if not summary_path.is_file():
        return "none", ""
    try:
        summary = json.loads(summary_path.read_text(encoding="utf-8"))
    except (OSError, ValueError) as e:
        return "corrupt", f"{summary_path} is unreadable: {e}"
    if not records_path.is_file():
        return "corrupt", f"{records_path} is missing"
    n, digest = records_digest(records_path)
    if summary.get("records_sha256"):
        if digest != summary["records_sha256"] or n != summary.get("records_count"):
            return "corrupt", (f"{records_path} has {n} records and checksum {digest[:12]}, the summary says "
                               f"{summary.get('records_count')} records, {str(summary['records_sha256'])[:12]}")
        return "done", ""
    try:
        read_records(cell_dir)
    except ValueError as e:
        return "corrupt", f"{records_path}: {e}"
    if summary.get("prompts") is not None and int(summary["prompts"]) != n:
        return "corrupt", f"{records_path} has {n} records, the summary says {summary['prompts']} prompts"
    return "done", ""


def reopen_corrupt(cell_dir: Path, detail: str) -> None:
    """Turn a finished cell whose records do not match its summary back into a partial cell: the
    summary is kept aside as ``summary.invalid.json``, the complete leading records become the
    partial file, and the runner reruns the rest."""
    log.warning("cell %s: %s — repairing: keeping its complete records and rerunning the rest", cell_dir.name, detail)
    if (cell_dir / SUMMARY).exists():
        os.replace(cell_dir / SUMMARY, cell_dir / "summary.invalid.json")
    if (cell_dir / RECORDS).exists():
        os.replace(cell_dir / RECORDS, cell_dir / PARTIAL)
    recover_partial(cell_dir)


def read_records(cell_dir: Path) -> list[dict]:
    path = cell_dir / RECORDS
    out = []
    for n, line in enumerate(path.read_text(encoding="utf-8").splitlines(), 1):
        if not line.strip():
            continue
        try:
            out.append(json.loads(line))
        except ValueError as e:
            raise ValueError(f"{path}, line {n}: not valid JSON ({e}); the file was truncated or edited — "
                             f"rerun `harness` with the same overrides to repair the cell") from None
    return out


# ---- per-cell lock --------------------------------------------------------------------------------

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
            return json.loads(self.path.read_text(encoding="utf-8") or "{}")
        except (OSError, ValueError):
            return {}

    def acquire(self) -> "CellLock":
        self.cell_dir.mkdir(parents=True, exist_ok=True)
        if self.mode == "flock":
            try:
                return self._acquire_flock()
            except OSError as e:
                if e.errno not in (errno.ENOSYS, errno.EOPNOTSUPP, errno.ENOLCK, errno.EINVAL):
                    raise
                log.warning("flock is not supported on %s (%s); using an O_EXCL lock file", self.cell_dir, e)
                self.mode = "excl"
                try:  # the empty file the flock attempt created is not an owner
                    if self.path.stat().st_size == 0:
                        self.path.unlink()
                except FileNotFoundError:
                    pass
        return self._acquire_excl()

    def _acquire_flock(self) -> "CellLock":
        fd = os.open(self.path, os.O_RDWR | os.O_CREAT, 0o644)
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
        if not owner:
            try:  # an empty or torn lock file: stale once it is older than a few seconds
                return time.time() - self.path.stat().st_mtime > 10
            except FileNotFoundError:
                return True
        if owner.get("host") == socket.gethostname():
            return not _pid_alive(int(owner.get("pid", -1)))
        try:
            return time.time() - self.path.stat().st_mtime > self.stale_after_s
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
                os.utime(self.path)
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
    if not path.exists():
        return None
    try:
        fd = os.open(path, os.O_RDONLY)
    except OSError:
        return None
    try:
        fcntl.flock(fd, fcntl.LOCK_SH | fcntl.LOCK_NB)
        fcntl.flock(fd, fcntl.LOCK_UN)
        return None  # nobody holds it: a stale file
    except BlockingIOError:
        try:
            return json.loads(path.read_text(encoding="utf-8") or "{}") or {"host": "?", "pid": "?"}
        except (OSError, ValueError):
            return {"host": "?", "pid": "?"}
    except OSError:
        return None
    finally:
        os.close(fd)
