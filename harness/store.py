"""Crash-safe result files: every file appears whole (write to a temp file, fsync, rename) or not at all.

A cell directory holds ``records.jsonl`` (one record per prompt) and ``summary.json``; the
summary is written last and marks the cell finished, so a rerun skips it. A killed cell
leaves at most ``records.partial.jsonl`` (never read as results) and is rerun from the start.
"""
from __future__ import annotations

import json
import math
import os
import tempfile
from pathlib import Path

SUMMARY = "summary.json"
RECORDS = "records.jsonl"
PARTIAL = "records.partial.jsonl"
ERROR = "error.json"


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
    """Appends records to the partial file as they come (each line flushed), then publishes
    them atomically as ``records.jsonl`` with :meth:`commit`."""

    def __init__(self, cell_dir: Path):
        self.cell_dir = cell_dir
        cell_dir.mkdir(parents=True, exist_ok=True)
        self.partial = cell_dir / PARTIAL
        self._f = self.partial.open("w", encoding="utf-8")

    def write(self, record: dict) -> None:
        self._f.write(dumps(record) + "\n")
        self._f.flush()

    def commit(self) -> Path:
        self._f.flush()
        os.fsync(self._f.fileno())
        self._f.close()
        final = self.cell_dir / RECORDS
        os.replace(self.partial, final)
        return final

    def abort(self) -> None:
        if not self._f.closed:
            self._f.close()


def is_finished(cell_dir: Path) -> bool:
    return (cell_dir / SUMMARY).is_file()


def read_records(cell_dir: Path) -> list[dict]:
    path = cell_dir / RECORDS
    return [json.loads(line) for line in path.read_text(encoding="utf-8").splitlines() if line.strip()]
