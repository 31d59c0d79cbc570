"""Crash-safe result files: every file appears whole (write to a temp file, fsync, rename) or not at all.

A cell directory holds ``records.jsonl`` (one record per prompt), ``records.sha256`` (one HMAC per record's
line, keyed by the results folder's secret: :mod:`harness.results.integrity`) and ``summary.json`` (sealed
the same way); the summary is written last and marks the cell finished, so a rerun skips it once its record
count, checksum, seal and every record's ranges verify (:func:`finished_state`). A cell that fails is
repaired, never skipped silently and never blessed: its files are kept aside as ``*.invalid*``, the leading
records whose lines still match their own checksums (and ranges) are kept, and every other record is rerun
(:func:`reopen_corrupt`). Files planted in a cell folder are never followed (:mod:`harness.results.cellfile`).

While a cell runs, each prompt's record is appended to ``records.partial.jsonl`` and its checksum to
``records.sha256`` (each flushed and fsynced, so a kill loses at most the prompt in flight); a killed cell
resumes at prompt granularity (:meth:`RecordWriter.resume` keeps every complete record whose checksum
matches). ``segments.json`` lists the cell's run segments (where each started, on which host, with which
inputs: :mod:`harness.run.fingerprint`); the summary holds them too, and the file stays (a summary rebuilt
after deletion). Two processes never run one cell: see :mod:`harness.run.lock` (re-exported here).
"""
from __future__ import annotations

import hashlib
import json
import logging
import math
import os
from pathlib import Path
from typing import Callable

from harness.config.legacy import current_names
from harness.results import cellfile, integrity
from harness.results.cellfile import (_finite, _json_default, atomic_write_bytes, atomic_write_text, dumps,
                                      fsync_dir)  # (re-exported)
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


def atomic_write_json(path: Path, obj) -> None:
    atomic_write_text(path, json.dumps(_finite(obj), default=_json_default, indent=2, ensure_ascii=False) + "\n")


def line_digest(line: bytes) -> str:
    """The checksum of one record: SHA-256 hex of its line's bytes (without the newline)."""
    return hashlib.sha256(line).hexdigest()


def invalid_name(name: str) -> str:
    """Where a file that failed verification is kept aside: ``summary.json`` -> ``summary.invalid.json``."""
    stem, dot, ext = name.partition(".")
    return f"{stem}{INVALID_SUFFIX}.{ext}" if dot else name + INVALID_SUFFIX


_NAMES = (SUMMARY, RECORDS, PARTIAL, DIGESTS, SEGMENTS, ERROR)  # the files of a cell folder, each a regular file


def clear_planted(cell_dir: Path) -> list[str]:
    """Move aside (by name, never opened) every cell file that is not a regular file (a planted link, FIFO...)."""
    notes = []
    for name in _NAMES:
        what = cellfile.kind(Path(cell_dir) / name)
        if what not in ("missing", "file"):
            notes.append(f"{name} was a {what}, moved aside as {cellfile.move_aside(Path(cell_dir) / name)}")
    if notes:
        log.warning("cell %s: %s — treated as a corrupt cell", Path(cell_dir).name, "; ".join(notes))
    return notes


def _copy_aside(path: Path) -> None:  # a copy as *.invalid*, written atomically (a planted link there is replaced)
    atomic_write_bytes(path.with_name(invalid_name(path.name)), cellfile.read_bytes(path))


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
        clear_planted(cell_dir)
        self.key = integrity.folder_key(cell_dir.parent, create=True, adopt=adopt_legacy)
        if resume:
            self.records = recover_partial(cell_dir, check)
        self._f = cellfile.open_file(self.partial, "a" if resume else "w")
        self._d = cellfile.open_file(cell_dir / DIGESTS, "a" if resume else "w")

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
        digest = integrity.line_mac(self.key, self.cell_dir.name, len(self.records), line.encode("utf-8"))
        for f, text in ((self._f, line), (self._d, digest)):  # the record, then its checksum
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
        fsync_dir(self.cell_dir)
        return final

    def abort(self) -> None:
        for f in (self._f, self._d):
            if not f.closed:
                f.close()


def _read_digests(cell_dir: Path) -> list[str]:
    """The per-record checksums (complete lines only; none when the file is missing)."""
    try:
        data = cellfile.read_bytes(cell_dir / DIGESTS)
    except OSError:
        return []
    return [line.decode("ascii", "replace") for line in data.split(b"\n")[:-1]]


def _parse_prefix(data: bytes, source: Path, digests: list[str] | None = None,
                  check: Check | None = None, key: bytes | None = None) -> tuple[list[dict], int, str]:
    """The complete, trusted records at the start of ``data`` whose indices run 0, 1, 2, ...; returns
    (records, byte length of that prefix, why it stopped early or ""). Stops at a torn or malformed line
    (bad JSON, bytes that are not UTF-8), a record of another cell, a line whose checksum is not the one
    ``digests`` holds for it (when given), or a record out of range (``check``)."""
    records, good, pos, why = list[dict](), 0, 0, ""
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
            mac = integrity.line_mac(key, source.parent.name, n, line) if key else line_digest(line)
            if digests is not None and (n >= len(digests) or digests[n] != mac):
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
    clear_planted(cell_dir)
    if not partial.exists() and final.exists() and not (cell_dir / SUMMARY).exists():
        os.replace(final, partial)
    if not partial.exists():
        (cell_dir / DIGESTS).unlink(missing_ok=True)
        return []
    raw = cellfile.read_bytes(partial)
    key = integrity.folder_key(cell_dir.parent, create=True, adopt=adopt_legacy)
    records, good, why = _parse_prefix(raw, partial, _read_digests(cell_dir), check, key)
    if why:
        _copy_aside(partial)
    if good != len(raw):
        _truncate(partial, good)
    digests = cell_dir / DIGESTS
    if digests.exists():
        _truncate(digests, len(records) * 65)  # 64 hex digits and a newline per record
    return [_restore_nan(current_names(r)) for r in records]


def _truncate(path: Path, size: int) -> None:
    with cellfile.open_file(path, "r+b") as f:
        f.truncate(size)
        f.flush()
        os.fsync(f.fileno())


def records_digest(path: Path) -> tuple[int, str]:
    """(number of records, SHA-256 hex of the file's bytes) of a ``records.jsonl``."""
    data = cellfile.read_bytes(path)
    return sum(1 for line in data.split(b"\n") if line.strip()), hashlib.sha256(data).hexdigest()


def is_finished(cell_dir: Path) -> bool:  # a summary exists (verified or not: finished_state)
    return cellfile.is_file(cell_dir / SUMMARY)


def read_summary(cell_dir: Path) -> dict:
    """A cell's summary; ValueError naming the file when it is unreadable or not a JSON object."""
    path = Path(cell_dir) / SUMMARY
    try:
        summary = json.loads(cellfile.read_text(path))
    except (OSError, ValueError) as e:  # UnicodeDecodeError and JSONDecodeError are ValueErrors
        raise ValueError(f"{path} is unreadable: {e}") from None
    if not isinstance(summary, dict):
        raise ValueError(f"{path} holds {type(summary).__name__}, not a summary object")
    return summary


def finished_state(cell_dir: Path, sealed: bool = True) -> tuple[str, str]:
    """("done" | "corrupt" | "none", detail). "done": the summary is a readable object, ``records.jsonl`` has
    the record count and checksum it stores (older summaries without a checksum: the count of parseable
    records equals ``prompts``), and every record is in range. "corrupt": anything else under a summary."""
    planted = [f"{name} is a {cellfile.kind(cell_dir / name)}" for name in _NAMES
               if cellfile.kind(cell_dir / name) not in ("missing", "file")]
    if cellfile.kind(cell_dir / SUMMARY) == "missing":
        return "none", ""
    if planted:
        return "corrupt", "; ".join(planted) + ", not a regular file"
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
    try:  # sealed: bound to the results folder's key (harness.results.integrity)
        unsealed = integrity.seal_problem(cell_dir, summary, cellfile.read_bytes(records_path)) if sealed else None
    except ValueError as e:
        unsealed = str(e)
    if unsealed:
        return "corrupt", unsealed
    return "done", ""


def write_summary(cell_dir: Path, summary: dict) -> None:  # sealed with its results folder's key, after its records
    atomic_write_json(Path(cell_dir) / SUMMARY, integrity.seal(cell_dir, summary, integrity.folder_key(
        Path(cell_dir).parent, create=True, adopt=adopt_legacy)))


def adopt_legacy(results_dir: Path, key: bytes) -> None:
    """Seal, as they are, the finished cells a harness without keys left in a folder that gets its key now."""
    for cell_dir in sorted(p for p in Path(results_dir).iterdir() if p.is_dir() and not p.is_symlink()):
        if finished_state(cell_dir, sealed=False)[0] == "done":
            summary = {**read_summary(cell_dir), integrity.ADOPTED: True}
            atomic_write_json(cell_dir / SUMMARY, integrity.seal(cell_dir, summary, key))
            log.warning("cell %s: written without a results folder key; sealed as it is", cell_dir.name)


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
    clear_planted(cell_dir)
    keep_aside(cell_dir / SUMMARY)
    if (cell_dir / RECORDS).exists():
        _copy_aside(cell_dir / RECORDS)
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
    for n, line in enumerate(cellfile.read_text(path).splitlines(), 1):
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
        data = json.loads(cellfile.read_text(cell_dir / SEGMENTS))
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
    n = sum(1 for x in cellfile.read_bytes(partial).split(b"\n")[:-1] if x.strip()) if cellfile.is_file(partial) else 0
    if owner:
        return {"status": "running", "prompts_written": n, "detail": f"{owner.get('host')} pid {owner.get('pid')}"}
    if state == "corrupt":
        return {"status": "corrupt", "prompts_written": n, "detail": detail}
    if (cell_dir / ERROR).exists():
        try:
            err = json.loads(cellfile.read_text(cell_dir / ERROR))
            detail = f"{err.get('kind')}: {str(err.get('error'))[:120]}"
        except (OSError, ValueError, AttributeError):
            detail = "unreadable error.json"
        return {"status": "failed", "prompts_written": n, "detail": detail}
    if n:
        return {"status": "partial", "prompts_written": n, "detail": "resumes at prompt %d" % n}
    return {"status": "pending", "prompts_written": 0, "detail": ""}
