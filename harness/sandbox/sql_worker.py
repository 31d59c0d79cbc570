"""The SQL worker: a process that runs generated queries, one JSON line in, one out, so that a query
that ignores its deadline — SQLite checks its progress handler between VM steps, never inside one
function call — or eats memory is killed without touching the harness (:mod:`.sql` keeps time).

Before it reads a query it limits its own address space, drops every capability, sets
``no_new_privs`` and installs the sandbox's seccomp filter without ``execve`` (no sockets, no new
processes, nothing executed). Each query then gets a read-only connection (``mode=ro``,
``query_only``, an in-memory temp store, a heap limit, a value-size limit, no attached databases)
whose authorizer allows reading tables and calling only :data:`ALLOWED_FUNCTIONS` — the functions
Spider's queries use and a few plain string, number and date functions; never ``load_extension``,
``fts3_tokenizer`` (it leaks and accepts a native pointer), ``zeroblob``/``randomblob``/``printf``
(values of any size) or anything else.
"""
from __future__ import annotations

import json
import os
import resource
import sqlite3
import sys
import time
from pathlib import Path

# Spider's gold queries use count, sum, avg, min, max and like; the rest are plain scalar functions
# a correct prediction may reasonably use. Anything else is refused ("not authorized").
ALLOWED_FUNCTIONS = frozenset({
    "count", "sum", "avg", "min", "max", "total", "group_concat", "like", "glob", "abs", "round", "length",
    "lower", "upper", "substr", "substring", "trim", "ltrim", "rtrim", "instr", "replace", "coalesce", "ifnull",
    "nullif", "iif", "date", "time", "datetime", "julianday", "strftime"})
HEAP_LIMIT_BYTES = 256 << 20


def _authorize(action: int, arg1, arg2, db_name, trigger) -> int:
    if action in (sqlite3.SQLITE_SELECT, sqlite3.SQLITE_READ, sqlite3.SQLITE_RECURSIVE):
        return sqlite3.SQLITE_OK
    if action == sqlite3.SQLITE_FUNCTION and (arg2 or "").lower() in ALLOWED_FUNCTIONS:
        return sqlite3.SQLITE_OK
    return sqlite3.SQLITE_DENY


class _PastDeadline(Exception):
    """SQLite stopped the query at its deadline (its progress handler): a killed query, not a wrong one."""


def query(db_path: str, sql: str, timeout_s: float, max_rows: int, max_value_bytes: int) -> list[tuple]:
    """Rows of one read-only statement; ``sqlite3`` errors (and ``ValueError``...) propagate."""
    con = sqlite3.connect(f"{Path(db_path).as_uri()}?mode=ro", uri=True)
    try:
        for pragma in ("PRAGMA query_only = ON", "PRAGMA temp_store = MEMORY",
                       f"PRAGMA hard_heap_limit = {HEAP_LIMIT_BYTES}",
                       "PRAGMA trusted_schema = OFF"):
            con.execute(pragma)
        capped = _cap_in_sqlite(con, max_value_bytes)
        con.set_authorizer(_authorize)
        deadline, stopped = time.monotonic() + timeout_s, []

        def past_deadline() -> int:
            if time.monotonic() > deadline:
                stopped.append(True)
            return int(bool(stopped))
        con.set_progress_handler(past_deadline, 1000)
        try:
            rows = con.execute(sql).fetchmany(max_rows + 1)
            return rows if capped else _checked_lengths(rows, max_value_bytes)
        except sqlite3.OperationalError:
            if stopped:  # SQLite's "interrupted": its own deadline, not a wrong query
                raise _PastDeadline(f"stopped (interrupted by SQLite): the query ran past its {timeout_s:g} s "
                                    "limit") from None
            raise
    finally:
        con.close()


def _cap_in_sqlite(con, max_value_bytes: int) -> bool:
    """SQLite's own caps on a value's length and on ATTACH (``Connection.setlimit``, Python >= 3.11); False where
    the Python has no ``setlimit`` (3.10): the authorizer still denies ATTACH and the heap limit holds, and the rows
    read are checked against the length cap after the fetch (``_checked_lengths``)."""
    if sys.version_info < (3, 11) or not hasattr(con, "setlimit"):
        return False
    con.setlimit(sqlite3.SQLITE_LIMIT_LENGTH, max_value_bytes)
    con.setlimit(sqlite3.SQLITE_LIMIT_ATTACHED, 0)
    return True


def _checked_lengths(rows: list[tuple], max_value_bytes: int) -> list[tuple]:
    """The rows, or SQLite's own "string or blob too big" error for a value longer than the cap."""
    for row in rows:
        for v in row:
            if isinstance(v, (str, bytes)) and len(v.encode() if isinstance(v, str) else v) > max_value_bytes:
                raise sqlite3.DataError("string or blob too big")
    return rows


def _encode(rows: list[tuple]) -> list[list]:
    return [[{"hex": v.hex()} if type(v) is bytes else v for v in row] for row in rows]


def _confine(memory_mb: int) -> None:
    from .kernel import seccomp, uid

    resource.setrlimit(resource.RLIMIT_AS, (memory_mb << 20, memory_mb << 20))
    resource.setrlimit(resource.RLIMIT_CORE, (0, 0))
    uid.drop(None)
    seccomp.install(os.getpid(), allow_exec=False)


def main() -> None:
    """Serve queries from stdin until it closes: ``{"db", "sql", "timeout_s", "max_rows",
    "max_value_bytes"}`` -> ``{"rows": [...]}`` or ``{"error": "..."}``."""
    _confine(int(sys.argv[1]) if len(sys.argv) > 1 else 1024)
    out = sys.stdout
    for line in sys.stdin:
        request = json.loads(line)
        reply: dict[str, object]
        try:
            rows = query(request["db"], request["sql"], request["timeout_s"], request["max_rows"],
                         request["max_value_bytes"])
            reply = {"rows": _encode(rows)}
        except _PastDeadline as e:
            reply = {"error": str(e), "killed": True}
        except MemoryError:
            reply = {"error": f"MemoryError: the query went over its memory limit ({HEAP_LIMIT_BYTES >> 20} MB)",
                     "killed": True}
        except (sqlite3.Error, sqlite3.Warning, ValueError, OverflowError) as e:
            reply = {"error": f"{type(e).__name__}: {e}"}
        out.write(json.dumps(reply) + "\n")
        out.flush()
