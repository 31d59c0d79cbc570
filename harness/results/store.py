"""Crash-safe result files: every file appears whole (write to a temp file, fsync, rename) or not at all.

A cell directory holds ``records.jsonl`` (one record per prompt), ``records.sha256`` (the SHA-256 of each
record's line, one per line) and ``summary.json``; the summary is written last and marks the cell finished,
so a rerun skips it. The summary stores the record count and a SHA-256 of ``records.jsonl``; a rerun
verifies them, and every record's fields against their ranges (:func:`harness.results.record.record_problems`),
before skipping (:func:`finished_state`). A cell that fails is repaired, never skipped silently and never
blessed: its files are kept aside as ``*.invalid*``, the leading records whose lines still match their own
checksums (and ranges) are kept, and every other record is rerun — a checksum is never written over bytes
the harness did not write (:func:`reopen_corrupt`).

While a cell runs, each prompt's record is appended to ``records.partial.jsonl`` and its line's checksum to
``records.sha256`` (each flushed and fsynced, so a kill loses at most the prompt in flight). A killed cell
is resumed at prompt granularity: :meth:`RecordWriter.resume` keeps every complete record whose checksum
matches, drops a torn last line, and the runner continues with the next prompt. ``records.partial.jsonl``
is never read as results. ``segments.json`` lists the cell's run segments (where each started, on which
host, with which inputs: :mod:`harness.run.fingerprint`) until the summary takes them over. Two processes never
run one cell: see :mod:`harness.run.lock` (re-exported here).
"""
from __future__ import annotations

import hashlib
import json
import logging
import math
import os
import shutil
import tempfile
from pathlib import Path
from typing import Callable

from harness.config.legacy import current_names
from harness.run.lock import LOCK, CellBusy, CellLock, lock_state  # noqa: F401  (the store's lock, re-exported)
from harness.results.record import record_problems

SUMMARY = "summary.json"
RECORDS = "records.jsonl"
PARTIAL = "records.partial.jsonl"
DIGESTS = "records.sha256"
ERROR = "error.json"
SEGMENTS = "segments.json"
INVALID_SUFFIX = ".invalid"  # summary.json -> summary.invalid.json, records.jsonl -> records.invalid.jsonl
log = logging.getLogger("harness")
Check = Callable[[dict], list]  # a record -> its problems (empty when it is in range)


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


def line_digest(line: bytes) -> str:
    """The checksum of one record: SHA-256 hex of its line's bytes (without the newline)."""
    return hashlib.sha256(line).hexdigest()


def invalid_name(name: str) -> str:
    """Where a file that failed verification is kept aside: ``summary.json`` -> ``summary.invalid.json``."""
    stem, dot, ext = name.partition(".")
    return f"{stem}{INVALID_SUFFIX}.{ext}" if dot else name + INVALID_SUFFIX


def keep_aside(path: Path) -> None:
    """Move a file that failed verification aside (``*.invalid*``), replacing an older one kept there."""
    if path.exists():
        os.replace(path, path.with_name(invalid_name(path.name)))


def clean_temp_files(cell_dir: Path) -> list[str]:
    """Remove the temporary files a killed writer or merger left in a cell (call under the cell's lock:
    only its holder writes there, so any temporary file found is stale). Returns their names."""
    removed = []
    for p in Path(cell_dir).glob(".*"):
        if p.is_file() and (p.name.endswith(".tmp") or p.name.startswith(".lock.stale.")):
            p.unlink(missing_ok=True)
            removed.append(p.name)
    if removed:
        log.warning("cell %s: removed %d temporary file(s) a killed run or merge left: %s", Path(cell_dir).name,
                    len(removed), ", ".join(sorted(removed)[:5]))
    return removed


class RecordWriter:
    """Appends one record per prompt to the partial file and its checksum to ``records.sha256`` (each line
    written whole with one ``write``, flushed and fsynced), then publishes the records atomically as
    ``records.jsonl`` with :meth:`commit`. ``RecordWriter(cell_dir)`` starts the cell afresh; :meth:`resume`
    keeps the verified records a killed run left (``check``: the range check of each record)."""

    def __init__(self, cell_dir: Path, resume: bool = False, check: Check | None = None):
        self.cell_dir = cell_dir
        cell_dir.mkdir(parents=True, exist_ok=True)
        self.partial = cell_dir / PARTIAL
        self.records: list[dict] = []
        if resume:
            self.records = recover_partial(cell_dir, check)
        self._f = self.partial.open("a" if resume else "w", encoding="utf-8")
        self._d = (cell_dir / DIGESTS).open("a" if resume else "w", encoding="utf-8")

    @classmethod
    def resume(cls, cell_dir: Path, check: Check | None = None) -> "RecordWriter":
        return cls(cell_dir, resume=True, check=check)

    @property
    def next_index(self) -> int:
        return len(self.records)

    def write(self, record: dict) -> None:
        if record.get("index") != len(self.records):
            raise ValueError(f"record index {record.get('index')} written out of order (expected {len(self.records)})")
        line = dumps(record)
        for f, text in ((self._f, line), (self._d, line_digest(line.encode("utf-8")))):  # the record, then its checksum
            f.write(text + "\n")
            f.flush()
            os.fsync(f.fileno())
        self.records.append(record)

    def commit(self) -> Path:
        for f in (self._f, self._d):
            f.flush()
            os.fsync(f.fileno())
            f.close()
        final = self.cell_dir / RECORDS
        os.replace(self.partial, final)
        _fsync_dir(self.cell_dir)
        return final

    def abort(self) -> None:
        for f in (self._f, self._d):
            if not f.closed:
                f.close()


def _fsync_dir(path: Path) -> None:
    try:
        fd = os.open(path, os.O_RDONLY)
    except OSError:
        return
    try:
        os.fsync(fd)
    except OSError:  # not every file system syncs a folder
        pass
    os.close(fd)


def _read_digests(cell_dir: Path) -> list[str]:
    """The per-record checksums (complete lines only; none when the file is missing)."""
    try:
        data = (cell_dir / DIGESTS).read_bytes()
    except OSError:
        return []
    return [line.decode("ascii", "replace") for line in data.split(b"\n")[:-1]]


def _parse_prefix(data: bytes, source: Path, digests: list[str] | None = None,
                  check: Check | None = None) -> tuple[list[dict], int, str]:
    """The complete, trusted records at the start of ``data`` whose indices run 0, 1, 2, ...; returns
    (records, byte length of that prefix, why it stopped early or ""). Stops at a torn or malformed line
    (bad JSON, bytes that are not UTF-8), a record of another cell, a line whose checksum is not the one
    ``digests`` holds for it (when given), or a record out of range (``check``)."""
    records, good, pos, why = [], 0, 0, ""
    while pos < len(data):
        nl = data.find(b"\n", pos)
        if nl < 0:
            log.warning("%s: dropping a torn last line (%d bytes) left by a kill", source, len(data) - pos)
            break
        line, n = data[pos:nl], len(records)
        try:
            rec = json.loads(line) if line.strip() else None
        except ValueError:
            why = f"line {n + 1} is not valid JSON"
            break
        if rec is not None:
            if not isinstance(rec, dict) or rec.get("index") != n or rec.get("cell_id") != source.parent.name:
                why = f"line {n + 1} is not record {n} of this cell"
                break
            if digests is not None and (n >= len(digests) or digests[n] != line_digest(line)):
                why = f"record {n} does not match its checksum in {DIGESTS} (edited, or written without one)"
                break
            problems = check(current_names(rec)) if check is not None else []
            if problems:
                why = f"record {n} is out of range: {'; '.join(problems[:3])}"
                break
            records.append(rec)
        pos = nl + 1
        good = pos
    if why:
        log.warning("%s: %s; it and every record after it are untrusted and rerun", source, why)
    return records, good, why


_TEXT_SUFFIXES = ("reason", "source", "mode", "label", "basis", "error", "text", "prompt", "id", "category")


def _restore_nan(record: dict) -> dict:
    """A record read back from JSON with NaN restored where :func:`dumps` wrote null for it (numeric
    fields), so a resumed cell summarises the same values as an uninterrupted one."""
    return {k: (math.nan if v is None and not k.endswith(_TEXT_SUFFIXES) else v) for k, v in record.items()}


def recover_partial(cell_dir: Path, check: Check | None = None) -> list[dict]:
    """Make ``records.partial.jsonl`` hold exactly its trusted records 0..k-1 — complete lines whose checksums
    match ``records.sha256`` and whose fields are in range — and return them. A torn last line is cut off; a
    file with any other untrusted line is first kept aside whole (``records.partial.invalid.jsonl``). A
    ``records.jsonl`` without a summary (a kill between publishing the records and writing the summary) is
    taken back as the partial file."""
    partial, final = cell_dir / PARTIAL, cell_dir / RECORDS
    if not partial.exists() and final.exists() and not (cell_dir / SUMMARY).exists():
        os.replace(final, partial)
    if not partial.exists():
        (cell_dir / DIGESTS).unlink(missing_ok=True)
        return []
    raw = partial.read_bytes()
    records, good, why = _parse_prefix(raw, partial, _read_digests(cell_dir), check)
    if why:
        shutil.copyfile(partial, partial.with_name(invalid_name(partial.name)))
    if good != len(raw):
        _truncate(partial, good)
    digests = cell_dir / DIGESTS
    if digests.exists():
        _truncate(digests, len(records) * 65)  # 64 hex digits and a newline per record
    return [_restore_nan(current_names(r)) for r in records]


def _truncate(path: Path, size: int) -> None:
    with path.open("r+b") as f:
        f.truncate(size)
        f.flush()
        os.fsync(f.fileno())


def records_digest(path: Path) -> tuple[int, str]:
    """(number of records, SHA-256 hex of the file's bytes) of a ``records.jsonl``."""
    data = path.read_bytes()
    return sum(1 for line in data.split(b"\n") if line.strip()), hashlib.sha256(data).hexdigest()


def is_finished(cell_dir: Path) -> bool:  # a summary exists (verified or not: finished_state)
    return (cell_dir / SUMMARY).is_file()


def read_summary(cell_dir: Path) -> dict:
    """A cell's summary; ValueError naming the file when it is unreadable or not a JSON object."""
    path = Path(cell_dir) / SUMMARY
    try:
        summary = json.loads(path.read_text(encoding="utf-8"))
    except (OSError, ValueError) as e:  # UnicodeDecodeError and JSONDecodeError are ValueErrors
        raise ValueError(f"{path} is unreadable: {e}") from None
    if not isinstance(summary, dict):
        raise ValueError(f"{path} holds {type(summary).__name__}, not a summary object")
    return summary


def finished_state(cell_dir: Path) -> tuple[str, str]:
    """("done" | "corrupt" | "none", detail). "done": the summary is a readable object, ``records.jsonl`` has
    the record count and checksum it stores (older summaries without a checksum: the count of parseable
    records equals ``prompts``), and every record is in range. "corrupt": anything else under a summary."""
    if not (cell_dir / SUMMARY).is_file():
        return "none", ""
    records_path = cell_dir / RECORDS
    try:
        summary = read_summary(cell_dir)
    except ValueError as e:
        return "corrupt", str(e)
    if not records_path.is_file():
        return "corrupt", f"{records_path} is missing"
    n, digest = records_digest(records_path)
    if summary.get("records_sha256"):
        if digest != summary["records_sha256"] or n != summary.get("records_count"):
            return "corrupt", (f"{records_path} has {n} records and checksum {digest[:12]}, the summary says "
                               f"{summary.get('records_count')} records, {str(summary['records_sha256'])[:12]}")
    elif summary.get("prompts") is not None and summary["prompts"] != n:
        return "corrupt", f"{records_path} has {n} records, the summary says {summary['prompts']} prompts"
    try:
        read_records(cell_dir, max_new_tokens=summary.get("max_new_tokens"))
    except ValueError as e:
        return "corrupt", str(e)
    return "done", ""


def reopen_corrupt(cell_dir: Path, detail: str, check: Check | None = None) -> None:
    """Turn a finished cell that failed verification back into a partial cell without blessing anything: the
    summary and records are kept aside (``summary.invalid.json``, ``records.invalid.jsonl``), the leading
    records whose lines match their own checksums and ranges become the partial file (with the run
    segments that wrote them), and the runner reruns every other record."""
    log.warning("cell %s: %s — repairing: its files are kept as *.invalid*, records that fail their checksum or "
                "range are rerun", cell_dir.name, detail)
    try:
        segments = read_summary(cell_dir).get("segments")
    except ValueError:
        segments = None
    keep_aside(cell_dir / SUMMARY)
    if (cell_dir / RECORDS).exists():
        shutil.copyfile(cell_dir / RECORDS, cell_dir / invalid_name(RECORDS))
        os.replace(cell_dir / RECORDS, cell_dir / PARTIAL)
    kept = recover_partial(cell_dir, check)
    (cell_dir / SEGMENTS).unlink(missing_ok=True)
    if kept and isinstance(segments, list):
        atomic_write_json(cell_dir / SEGMENTS, [s for s in segments if isinstance(s, dict)])


def read_records(cell_dir: Path, max_new_tokens: int | None = None, check: bool = True) -> list[dict]:
    """The records of a finished cell under the current field names (:mod:`harness.config.legacy`); ValueError naming
    the line when one is not valid JSON or (``check``) has a field out of range
    (:func:`harness.results.record.record_problems`)."""
    path = cell_dir / RECORDS
    out = []
    for n, line in enumerate(path.read_text(encoding="utf-8").splitlines(), 1):
        if not line.strip():
            continue
        try:
            rec = json.loads(line)
        except ValueError as e:
            raise ValueError(f"{path}, line {n}: not valid JSON ({e}); the file was truncated or edited — "
                             f"rerun `harness` with the same overrides to repair the cell") from None
        rec = current_names(rec)
        problems = record_problems(rec, max_new_tokens) if check else []
        if problems:
            raise ValueError(f"{path}, line {n}: out of range: {'; '.join(problems[:3])}; the file was edited or "
                             f"written wrongly — rerun `harness` with the same overrides to repair the cell")
        out.append(rec)
    return out


# ---- run segments -------------------------------------------------------------------------------

def read_segments(cell_dir: Path) -> list[dict]:
    """The cell's run segments so far (first run, then each resume); [] when none are stored."""
    try:
        data = json.loads((cell_dir / SEGMENTS).read_text(encoding="utf-8"))
    except (OSError, ValueError):
        return []
    return [s for s in data if isinstance(s, dict)] if isinstance(data, list) else []


def add_segment(cell_dir: Path, segment: dict) -> list[dict]:
    """Append one run segment (``from_index``, when, where, with which inputs) and return them all."""
    segments = [*read_segments(cell_dir), segment]
    atomic_write_json(cell_dir / SEGMENTS, segments)
    return segments


def cell_status(cell_dir: Path) -> dict:
    """State of a cell folder for ``harness plan``: status (done | running | partial | failed | corrupt |
    pending) and how many prompts are written."""
    state, detail = finished_state(cell_dir)
    if state == "done":
        return {"status": "done", "prompts_written": records_digest(cell_dir / RECORDS)[0], "detail": ""}
    owner = lock_state(cell_dir)
    partial = cell_dir / PARTIAL
    n = sum(1 for line in partial.read_bytes().split(b"\n")[:-1] if line.strip()) if partial.exists() else 0
    if owner:
        return {"status": "running", "prompts_written": n, "detail": f"{owner.get('host')} pid {owner.get('pid')}"}
    if state == "corrupt":
        return {"status": "corrupt", "prompts_written": n, "detail": detail}
    if (cell_dir / ERROR).exists():
        try:
            err = json.loads((cell_dir / ERROR).read_text(encoding="utf-8"))
            detail = f"{err.get('kind')}: {str(err.get('error'))[:120]}"
        except (OSError, ValueError, AttributeError):
            detail = "unreadable error.json"
        return {"status": "failed", "prompts_written": n, "detail": detail}
    if n:
        return {"status": "partial", "prompts_written": n, "detail": "resumes at prompt %d" % n}
    return {"status": "pending", "prompts_written": 0, "detail": ""}
