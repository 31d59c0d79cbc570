"""One cell's run: open it (skip, repair or force; lock; writer), check its inputs on resume, and end it
(failed with ``error.json``, or discarded leaving nothing this run created).

Opening a cell (:meth:`CellRun.open`), by its verified state (:func:`harness.run.cell.verified_state`):

* done — skipped (``force`` that names it reruns it from scratch);
* conflict — a finished cell measured under another identity: a :class:`~harness.config.identity.CellConflict`
  (a config error) unless ``force`` names it (``force=<cell id>``, ``force=corrupt``); then its files are
  kept aside as ``*.invalid*`` and it reruns;
* corrupt — files that fail verification: repaired on its own (:func:`harness.results.store.reopen_corrupt`: the
  records that still match their checksums are kept, the rest rerun), or with ``force=corrupt`` /
  ``force=<cell id>`` rerun from scratch, its files kept aside;
* otherwise — run, resuming at the first prompt without a trusted record.

Temporary files a killed writer or merge left are removed under the lock. A resumed cell's prompts and
weights must be those its records came from (:mod:`harness.run.fingerprint`), else the cell fails with
:class:`~harness.run.fingerprint.InputsChanged` naming the file, its records untouched.
"""
from __future__ import annotations

import logging
import os
import platform
import traceback
from dataclasses import dataclass
from datetime import datetime, timezone
from pathlib import Path
from typing import Any, TypeVar

from harness.run import context

from harness.results import store
from harness.run.cell import Cell, CellPlan, forced, prepare_cell, verified_state
from harness.errors import ConfigError
from harness.run.fingerprint import InputsChanged, changed_inputs
from harness.config.identity import CellConflict, known_ids
from harness.results.record import record_problems

log = logging.getLogger("harness")


@dataclass
class CellOutcome:
    status: str  # "done" | "skipped" | "failed" | "n/a" | "busy"
    cell_id: str
    cell_dir: Path
    error: str | None = None
    note: str = ""  # a finished cell's numbers (prompts, tokens/s), shown on its one line

    def line(self) -> str:
        """The one line that announces the cell's outcome (``harness``, ``harness task``)."""
        return (f"[{self.status}] {self.cell_id}" + (f": {self.error}" if self.error else "")
                + (f" ({self.note})" if self.note else ""))


def now() -> str:
    return datetime.now(timezone.utc).isoformat(timespec="seconds")


def _failure_kind(e: BaseException) -> str:
    import errno

    import torch

    if isinstance(e, torch.OutOfMemoryError) or "out of memory" in str(e).lower():
        return "oom"
    if isinstance(e, OSError) and e.errno in (errno.ENOSPC, errno.EDQUOT):
        return "disk full"
    return type(e).__name__


T = TypeVar("T")


def _opened(value: T | None, cid: str, what: str) -> T:
    if value is None:
        raise RuntimeError(f"cell {cid} has no {what}: it was not opened to run")
    return value


class CellRun:
    """One cell of a run (alone, or one method of an interleaved comparison): its lock, writer and decoder,
    the records it has so far, and its outcome once it has one."""

    def __init__(self, cell: Cell, results_dir: str | Path):
        self.cell = cell  # the typed cell (validated once, when it was built)
        self.cfg, self.cid, self.cell_dir = prepare_cell(cell.config, results_dir)  # the gpu label resolved
        self.plan: CellPlan | None = None
        self.lock: store.CellLock | None = None
        self.writer: store.RecordWriter | None = None
        self.decoder: Any = None
        self.outcome: CellOutcome | None = None
        self.started = now()
        self.resumed_at = 0
        self.fitted: list[tuple[list[int], int | None]] = []  # (prompt ids as run, original length if truncated)

    @property
    def cell_plan(self) -> CellPlan:
        """The plan of a cell that runs (set when it opens; a not-applicable cell never runs)."""
        return _opened(self.plan, self.cid, "plan")

    @property
    def open_writer(self) -> store.RecordWriter:
        """The record writer of a cell that holds its lock and runs."""
        return _opened(self.writer, self.cid, "record writer")

    @property
    def held_lock(self) -> store.CellLock:
        return _opened(self.lock, self.cid, "lock")

    def finish(self, status: str, error: str | None = None, note: str = "") -> CellOutcome:
        self.outcome = CellOutcome(status, self.cid, self.cell_dir, error, note)
        return self.outcome

    def fail(self, e: BaseException) -> CellOutcome:
        if self.writer is not None:
            self.writer.abort()
        kind = _failure_kind(e)
        import torch

        if torch.cuda.is_available():
            torch.cuda.empty_cache()
        if self.lock is not None:  # only the lock holder writes into the cell
            try:
                store.atomic_write_json(self.cell_dir / store.ERROR, {
                    "cell_id": self.cid, "kind": kind, "error": str(e), "traceback": traceback.format_exc(),
                    "at": now(), "config": self.cfg,
                    "prompts_written": self.writer.next_index if self.writer is not None else 0})
            except Exception as werr:  # noqa: BLE001 — a read-only or full results folder must not stop the sweep
                log.error("cell %s: could not write %s (%s: %s)", self.cid, self.cell_dir / store.ERROR,
                          type(werr).__name__, werr)
        log.error("cell %s failed (%s): %s", self.cid, kind, e)
        self.release()
        return self.finish("failed", f"{kind}: {e}")

    def release(self) -> None:
        if self.lock is not None:
            self.lock.release()
            self.lock = None

    def discard(self) -> None:
        """A configuration error found only once data and models are at hand: leave nothing behind that
        this run created (records a previous run wrote stay, for its resume)."""
        if self.writer is not None:
            self.writer.abort()
            if self.resumed_at == 0:
                for name in (store.PARTIAL, store.DIGESTS, store.SEGMENTS):
                    (self.cell_dir / name).unlink(missing_ok=True)
                if self.lock is not None:
                    self.lock.path.unlink(missing_ok=True)
        self.release()
        if self.cell_dir.is_dir() and not any(self.cell_dir.iterdir()):
            self.cell_dir.rmdir()

    # ---- opening ------------------------------------------------------------------------------------

    def open(self, force: Any) -> CellOutcome | None:
        """Plan, skip, lock, repair and open the writer; returns the outcome when the cell will not run.
        A ConfigError (bad parameters, a conflicting finished cell) is raised, never recorded as a failure."""
        if self.cell.plan is None:
            # announced by its outcome's line
            log.debug("cell %s is not applicable: %s", self.cid, self.cell.not_applicable)
            return self.finish("n/a", self.cell.not_applicable)
        self.plan = self.cell.plan
        if self._skip(force):
            return self.finish("skipped")
        try:
            self.lock = store.CellLock(self.cell_dir).acquire()
        except store.CellBusy as e:
            log.warning("%s; not running it here", e)
            return self.finish("busy", str(e))
        except OSError as e:
            return self.fail(e)
        try:
            if self._skip(force):  # another process may have finished it meanwhile
                self.release()
                return self.finish("skipped")
            self._prepare_files(force)
        except ConfigError:
            self.release()
            raise
        except Exception as e:  # noqa: BLE001 — the cell's own failure: recorded in its folder, the sweep goes on
            return self.fail(e)
        return None

    def _skip(self, force: Any) -> bool:
        state, detail = verified_state(self.cell_dir, self.cfg)
        if forced(force, known_ids(self.cfg), state):
            return False
        if state == "conflict":
            raise CellConflict(detail)
        if state == "done":
            log.debug("cell %s already finished; skipping", self.cid)  # announced by its outcome's line
        return state == "done"

    def check_record(self, record: dict) -> list[str]:
        """A kept record's range problems (new tokens bounded by the cell's max_new_tokens when known)."""
        return record_problems(record, context.configured_max_new_tokens(self.cfg))

    def _prepare_files(self, force: Any) -> None:
        """Under the lock: clear what a killed run left, repair or set aside, open the writer."""
        store.clean_temp_files(self.cell_dir)
        state, detail = verified_state(self.cell_dir, self.cfg)
        rerun = forced(force, known_ids(self.cfg), state)
        if rerun:  # files that failed verification are kept aside; a good cell's are replaced
            for name in (store.SUMMARY, store.RECORDS, store.PARTIAL, store.DIGESTS, store.SEGMENTS):
                if state in ("corrupt", "conflict") and name in (store.SUMMARY, store.RECORDS):
                    store.keep_aside(self.cell_dir / name)
                (self.cell_dir / name).unlink(missing_ok=True)
        elif state == "corrupt":
            store.reopen_corrupt(self.cell_dir, detail, self.check_record)
        (self.cell_dir / store.ERROR).unlink(missing_ok=True)
        self.writer = store.RecordWriter(self.cell_dir, resume=not rerun, check=self.check_record)
        self.resumed_at = self.writer.next_index
        if self.resumed_at:
            log.info("cell %s: resuming at prompt %d (%d records kept)", self.cid, self.resumed_at, self.resumed_at)

    def start_segment(self, inputs: dict, partners: list[str]) -> None:
        """Record this run segment: where it starts, on which host, from which inputs, interleaved with which
        cells. A resumed cell whose inputs changed raises :class:`InputsChanged` (its records untouched)."""
        earlier = store.read_segments(self.cell_dir)
        if self.resumed_at:
            stored = next((s["inputs"] for s in earlier if isinstance(s.get("inputs"), dict)), None)
            if stored is None:
                log.warning("cell %s: its %d records carry no record of their inputs (an older run); resuming "
                            "without checking them", self.cid, self.resumed_at)
            elif changed_inputs(stored, inputs):
                raise InputsChanged(f"cell {self.cid}: not resuming: " + "; ".join(changed_inputs(stored, inputs))
                                    + f". Its {self.resumed_at} records came from the earlier version. Restore it, or "
                                    f"rerun the cell from scratch with force={self.cid}")
        else:  # a fresh start: no earlier segment belongs to these records
            (self.cell_dir / store.SEGMENTS).unlink(missing_ok=True)
        store.add_segment(self.cell_dir, {"from_index": self.resumed_at, "at": now(), "host": platform.node(),
                                          "pid": os.getpid(), "inputs": inputs, "interleaved_with": partners})
