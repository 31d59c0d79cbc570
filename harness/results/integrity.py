"""Binding a cell's files to the results folder that holds them: an HMAC keyed by a per-results-folder secret.

A plain checksum proves nothing against an edit that recomputes it: a record edited together with its line in
``records.sha256`` (and the summary's ``records_sha256``) passed. Here every line of ``records.sha256`` is
HMAC-SHA256 over (cell id, record index, the record's line), and a finished cell's summary carries
``integrity_hmac``: HMAC-SHA256 over (cell id, the bytes of ``records.jsonl``, the summary's own other fields),
all keyed by ``.integrity.key`` in the results folder (32 random bytes, created once, mode 0600; it never
leaves the folder and is never written into a record, a summary or a report). An edit that does not know
the key is detected: the cell is corrupt — repaired (rerun) when it runs, and a problem in the report.

Cells a harness without keys finished are *adopted* when a folder gets its key (their summaries sealed as
they are, marked ``integrity_adopted``): from then on, an edit is detected. Anyone who can read the key can
forge; keep results folders as private as the key's mode.
"""
from __future__ import annotations

import hashlib
import hmac
import json
import logging
import os
import secrets
import tempfile
from pathlib import Path
from typing import Literal, overload

from harness.results import cellfile
from harness.results.cellfile import _finite, _json_default

KEY_FILE = ".integrity.key"
SEAL = "integrity_hmac"
ADOPTED = "integrity_adopted"
log = logging.getLogger("harness")


@overload
def folder_key(results_dir: Path, create: Literal[True], adopt=None) -> bytes: ...
@overload
def folder_key(results_dir: Path, create: bool = False, adopt=None) -> bytes | None: ...
def folder_key(results_dir: Path, create: bool = False, adopt=None) -> bytes | None:
    """The results folder's key (None when it has none and ``create`` is false). A key file that is not 32
    bytes of hex raises ValueError naming it: a damaged key verifies nothing. ``adopt(results_dir, key)`` runs
    once, when this call created the key (the store's adoption of older cells)."""
    path = Path(results_dir) / KEY_FILE
    try:
        text = cellfile.read_text(path).strip()
    except FileNotFoundError:
        if not create:
            return None
        return _create(Path(results_dir), adopt)
    try:
        key = bytes.fromhex(text)
    except ValueError:
        key = b""
    if len(key) != 32:
        raise ValueError(f"{path} is not a results folder key (64 hex digits); restore it or remove the folder's "
                         "results")
    return key


def _create(results_dir: Path, adopt) -> bytes:
    results_dir.mkdir(parents=True, exist_ok=True)
    fd, tmp = tempfile.mkstemp(dir=results_dir, prefix=".integrity.", suffix=".tmp")  # mode 0600
    try:
        os.write(fd, secrets.token_hex(32).encode())
        os.close(fd)
        try:
            os.link(tmp, results_dir / KEY_FILE)  # atomic: one process's key wins, whole
        except FileExistsError:
            return folder_key(results_dir, create=True)  # another process's key, whole
    finally:
        Path(tmp).unlink(missing_ok=True)
    key = folder_key(results_dir, create=True)  # the key just linked
    if adopt is not None:
        adopt(results_dir, key)
    return key


def line_mac(key: bytes, cell_id: str, index: int, line: bytes) -> str:
    """One line of ``records.sha256``: the record bound to its cell and position."""
    return hmac.new(key, f"{cell_id}\n{index}\n".encode() + line, hashlib.sha256).hexdigest()


def as_stored(summary: dict) -> dict:
    """The summary as ``summary.json`` holds it (NaN as null, numpy values as Python's)."""
    return json.loads(json.dumps(_finite(summary), default=_json_default))


def summary_mac(key: bytes, cell_id: str, records: bytes, summary: dict) -> str:
    """Over the cell id, the records' bytes and the summary's other fields as stored."""
    body = json.dumps({k: v for k, v in as_stored(summary).items() if k != SEAL}, sort_keys=True)
    return hmac.new(key, f"{cell_id}\n".encode() + hashlib.sha256(records).digest() + body.encode(),
                    hashlib.sha256).hexdigest()


def seal(cell_dir: Path, summary: dict, key: bytes) -> dict:
    """``summary`` with its ``integrity_hmac`` (after ``records.jsonl`` is published)."""
    records = cellfile.read_bytes(Path(cell_dir) / "records.jsonl")
    out = {k: v for k, v in summary.items() if k != SEAL}
    return {**out, SEAL: summary_mac(key, Path(cell_dir).name, records, out)}


def seal_problem(cell_dir: Path, summary: dict, records: bytes) -> str | None:
    """Why a finished cell's summary and records do not carry a valid seal of their folder's key, or None (also
    None in a folder without a key: nothing to check against)."""
    key = folder_key(Path(cell_dir).parent)
    if key is None:
        return None
    if not isinstance(summary.get(SEAL), str):
        return f"{Path(cell_dir).name}/summary.json carries no {SEAL} of its results folder's key (edited, or " \
               "written elsewhere)"
    if not hmac.compare_digest(summary[SEAL], summary_mac(key, Path(cell_dir).name, records, summary)):
        return (f"{Path(cell_dir).name}: records.jsonl or summary.json does not match its {SEAL} (keyed by the "
                f"results folder's {KEY_FILE}): edited after it was written")
    return None


def rekey(cell_dir: Path, adopt=None) -> None:
    """Bind a finished cell copied from another results folder (``harness merge``; verified there under that
    folder's key) to this folder's key: its checksum lines and its summary's seal."""
    cell_dir = Path(cell_dir)
    key = folder_key(cell_dir.parent, create=True, adopt=adopt)
    lines = cellfile.read_bytes(cell_dir / "records.jsonl").split(b"\n")[:-1]
    cellfile.atomic_write_text(cell_dir / "records.sha256", "".join(
        line_mac(key, cell_dir.name, i, line) + "\n" for i, line in enumerate(lines)))
    summary = json.loads(cellfile.read_text(cell_dir / "summary.json"))
    sealed = seal(cell_dir, summary, key)
    cellfile.atomic_write_text(cell_dir / "summary.json",
                               json.dumps(as_stored(sealed), indent=2, ensure_ascii=False) + "\n")
