"""Generated SQL: :func:`readonly_query` runs one statement in a worker process (:mod:`.sql_worker`:
read-only, an authorizer, a function allowlist, limits, seccomp) and kills the worker when the
query runs past its time limit by :data:`GRACE_S` — SQLite's own deadline (a progress handler)
cannot interrupt one long function call. A killed query raises :class:`QueryKilled`, scored as a
wrong answer. Workers are kept for the next query (a small pool, one per concurrent caller), and
replaced when killed."""
from __future__ import annotations

import atexit
import json
import os
import select
import sqlite3
import subprocess
import sys
import threading
import time
from pathlib import Path

from .levels import PACKAGE_PARENT

SQL_ISOLATION = "sqlite-readonly-process"  # what contains generated SQL (recorded as meta.isolation)
GRACE_S = 1.0  # past the query's own time limit, the worker is killed
WORKER_MEMORY_MB = 1024


class QueryError(Exception):
    """A generated query that failed, was denied, ran too long, or returned too much."""


class QueryKilled(QueryError):
    """The query's worker was killed: past its time limit, or out of memory."""


def first_statement(sql: str) -> str:
    """``sql`` up to the ``;`` that ends its first complete statement (``sqlite3.complete_statement``:
    a ``;`` inside a string literal, a quoted name or a comment ends nothing), without that ``;``;
    the whole text where no ``;`` completes one."""
    start = 0
    while (i := sql.find(";", start)) >= 0:
        if sqlite3.complete_statement(sql[: i + 1]):
            return sql[:i]
        start = i + 1
    return sql


class _Worker:
    def __init__(self):
        code = (f"import sys; sys.path.insert(0, {PACKAGE_PARENT!r}); "
                "from harness.sandbox.sql_worker import main; main()")
        self.proc = subprocess.Popen([sys.executable, "-I", "-S", "-B", "-c", code, str(WORKER_MEMORY_MB)],
                                     stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=subprocess.DEVNULL,
                                     env={"PATH": "/usr/bin:/bin", "LANG": "C.UTF-8"}, start_new_session=True)
        self.buffer = b""

    def ask(self, request: dict, wall_s: float) -> dict:
        """The worker's reply, or :class:`QueryKilled` (the worker is then dead)."""
        self.proc.stdin.write((json.dumps(request) + "\n").encode())
        self.proc.stdin.flush()
        deadline, fd = time.monotonic() + wall_s, self.proc.stdout.fileno()
        while b"\n" not in self.buffer:
            remaining = deadline - time.monotonic()
            if remaining <= 0 or not select.select([fd], [], [], remaining)[0]:
                self.kill()
                raise QueryKilled(f"killed: the query ran past its {request['timeout_s']:g} s limit")
            chunk = os.read(fd, 1 << 20)
            if not chunk:
                self.kill()
                raise QueryKilled(f"killed: the query's process died (exit code {self.proc.returncode}; "
                                  f"over its {WORKER_MEMORY_MB} MB memory limit?)")
            self.buffer += chunk
        line, _, self.buffer = self.buffer.partition(b"\n")
        return json.loads(line)

    def kill(self) -> None:
        self.proc.kill()
        self.proc.wait()


_IDLE: list[_Worker] = []
_LOCK = threading.Lock()


def _shutdown() -> None:
    with _LOCK:
        for worker in _IDLE:
            worker.kill()
        _IDLE.clear()


atexit.register(_shutdown)


def readonly_query(db_path, sql: str, timeout_s: float = 5.0, max_rows: int = 100_000,
                   max_value_bytes: int = 10_000_000) -> list[tuple]:
    """Rows of one read-only statement on ``db_path``; :class:`QueryError` on any failure
    (:class:`QueryKilled` when it had to be killed)."""
    path = Path(db_path).resolve()
    if not path.is_file():
        raise QueryError(f"database not found: {path}")
    with _LOCK:
        worker = _IDLE.pop() if _IDLE else None
    worker = worker or _Worker()
    request = {"db": str(path), "sql": sql, "timeout_s": timeout_s, "max_rows": max_rows,
               "max_value_bytes": max_value_bytes}
    try:
        reply = worker.ask(request, timeout_s + GRACE_S)
    except (OSError, ValueError):  # a worker that died between queries: a fresh one, once
        worker.kill()
        worker = _Worker()
        reply = worker.ask(request, timeout_s + GRACE_S)
    with _LOCK:
        _IDLE.append(worker)
    # stopped at its deadline or over its memory inside the worker: killed, as by the worker's kill
    if "error" in reply:
        raise (QueryKilled if reply.get("killed") else QueryError)(reply["error"])
    rows = [tuple(bytes.fromhex(v["hex"]) if type(v) is dict else v for v in row) for row in reply["rows"]]
    if len(rows) > max_rows:
        raise QueryError(f"more than {max_rows} rows")
    return rows
