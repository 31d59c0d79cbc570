"""Generated code is contained, in both isolation modes: hostile Python (infinite loop, fork bomb,
deleting files outside its temporary directory, opening a socket) fails and harms nothing;
generated SQL cannot modify, attach or create databases, calls only allowed functions, and is
killed — in its own process — when it runs past its time limit, even inside one function call.
The fallback mode (no namespaces) always runs; namespaces mode where ``unshare`` works."""
import hashlib
import os
import shutil
import socket
import subprocess
import time
from contextlib import contextmanager
from pathlib import Path

import pytest

from harness.sandbox import (PythonLimits, QueryError, landlock_abi, namespaces_available, readonly_query, run_python,
                             seccomp_available)
from harness.sandbox.sql import QueryKilled, first_statement

FAST = PythonLimits(timeout_s=3.0)


# the fallback runs here as root (CI): opted in, once for the module (tests/conftest.py)
pytestmark = pytest.mark.usefixtures("sandbox_root_opt_in")

KERNEL_LAYERS = seccomp_available() and bool(landlock_abi())  # what the fallback needs
HAS_NAMESPACES = namespaces_available() and seccomp_available()
_NO_NAMESPACES = pytest.mark.skipif(not HAS_NAMESPACES, reason="no namespaces + seccomp here (the fallback is tested)")
_NO_FALLBACK = pytest.mark.skipif(not KERNEL_LAYERS, reason="no seccomp + Landlock here: the fallback refuses to run "
                                                            "(the 'weak' level is tested)")
NAMESPACES = pytest.param("namespaces", marks=_NO_NAMESPACES)
FALLBACK = pytest.param("fallback", marks=_NO_FALLBACK)
MODES = [NAMESPACES, FALLBACK]
# (mode, audit hook): without the hook only the kernel layers protect
LAYERS = [pytest.param("namespaces", True, marks=_NO_NAMESPACES), pytest.param("fallback", True, marks=_NO_FALLBACK),
          pytest.param("namespaces", False, marks=_NO_NAMESPACES), pytest.param("fallback", False, marks=_NO_FALLBACK)]


@pytest.mark.parametrize("mode", MODES)
def test_a_correct_program_passes_and_failures_fail(mode):
    ok = run_python("print(sum(range(10)))", FAST, isolation=mode)
    assert ok.passed and ok.stdout.strip() == "45" and ok.isolation == mode
    assert not run_python("assert 1 + 1 == 3", FAST, isolation=mode).passed
    assert not run_python("raise SystemExit(0)", FAST, isolation=mode).passed  # leaving early is not passing
    assert not run_python("import os\nos._exit(0)", FAST, isolation=mode).passed
    assert not run_python("def f(:\n", FAST, isolation=mode).passed


@pytest.mark.parametrize("mode", MODES)
def test_infinite_loop_times_out(mode):
    result = run_python("while True:\n    pass\n", PythonLimits(timeout_s=1.5), isolation=mode)
    assert result.timed_out and not result.passed  # only the deadline's kill sets timed_out (no wall-clock assert)


@pytest.mark.parametrize("mode", MODES)
def test_memory_limit(mode):
    program = "x = bytearray(3 << 30)\nprint(len(x))"
    assert not run_python(program, PythonLimits(timeout_s=3.0, memory_mb=512), isolation=mode).passed


def processes_mentioning(text: str) -> list[str]:
    found = []
    for cmdline in Path("/proc").glob("[0-9]*/cmdline"):
        try:
            if text.encode() in cmdline.read_bytes():
                found.append(cmdline.parent.name)
        except OSError:
            continue
    return found


@contextmanager
def process_with_secret(secret: str):
    """A process started with ``secret`` in its environment, as a harness launched with tokens is
    (``/proc/<pid>/environ`` shows the environment a process was started with). Yields its pid."""
    proc = subprocess.Popen(["sleep", "120"], env={**os.environ, "HARNESS_TEST_SECRET": secret})
    try:
        for _ in range(500):  # until exec has finished (then it is readable from outside the sandbox)
            if secret in Path(f"/proc/{proc.pid}/environ").read_text():
                break
            time.sleep(0.01)
        else:
            raise AssertionError("the helper's environment never became readable")
        yield proc.pid
    finally:
        proc.kill()
        proc.wait()


@pytest.mark.parametrize("mode", MODES)
def test_fork_bomb_is_stopped(mode):
    result = run_python("import os\nwhile True:\n    os.fork()\n", FAST, isolation=mode)
    assert not result.passed


@pytest.mark.parametrize("mode", MODES)
def test_children_left_behind_are_killed(mode):
    # without the audit hook the program may fork (namespaces) or be refused (seccomp); either way
    # nothing it started outlives it: a PID namespace, or the checker as child subreaper
    program = "import os, time\nprint(os.getcwd(), flush=True)\nfor _ in range(8):\n    if os.fork() == 0:\n" \
              "        os.setsid()\n        time.sleep(600)\n"
    result = run_python(program, FAST, audit_guard=False, isolation=mode)
    tmp = result.stdout.split()[0]
    assert "harness-sandbox-" in tmp
    assert processes_mentioning(tmp) == []


@pytest.mark.parametrize("mode,guard", LAYERS)
def test_cannot_delete_or_write_outside_its_directory(tmp_path, mode, guard):
    victim = tmp_path / "victim.txt"
    victim.write_text("precious")
    program = f"""
import os, shutil
for attempt in (lambda: os.remove({str(victim)!r}), lambda: shutil.rmtree({str(tmp_path)!r}),
                lambda: open({str(tmp_path / 'new.txt')!r}, 'w').write('x'),
                lambda: os.rename({str(victim)!r}, 'stolen.txt')):
    try:
        attempt()
    except OSError as e:
        print('denied', type(e).__name__)
    else:
        print('DONE')
try:  # its own directory is writable: in the namespaces mode (a noexec tmpfs) it creates files there
    OWN = 'own.txt'
    f = open(OWN, 'w')
except PermissionError:  # the fallback (a host folder) creates nothing: it writes its program.py (issue 31)
    OWN = 'program.py'
    f = open(os.open(OWN, os.O_WRONLY | os.O_TRUNC), 'w')
with f:
    f.write('mine')
print('wrote', OWN)
try:  # and, in the namespaces mode, reads back; the fallback's folder is write-only (issue 31)
    print('read back', open(OWN).read())
except PermissionError:
    print('write-only')
"""
    result = run_python(program, FAST, audit_guard=guard, isolation=mode)
    assert result.passed, result.stderr
    assert "DONE" not in result.stdout and result.stdout.count("denied") == 4
    assert ("wrote own.txt\nread back mine" if mode == "namespaces" else "wrote program.py\nwrite-only") in result.stdout
    assert victim.read_text() == "precious" and not (tmp_path / "new.txt").exists()


@pytest.mark.parametrize("mode,guard", LAYERS)
def test_no_network(mode, guard):
    with socket.socket() as server:
        server.bind(("127.0.0.1", 0))
        server.listen(1)  # the kernel completes a connection into the backlog, accepted or not
        program = f"import socket\ns = socket.create_connection(('127.0.0.1', {server.getsockname()[1]}), timeout=2)\n" \
                  "print('connected')"
        result = run_python(program, FAST, audit_guard=guard, isolation=mode)
        assert not result.passed and "connected" not in result.stdout
        server.setblocking(False)
        with pytest.raises(BlockingIOError):
            server.accept()


@pytest.mark.parametrize("mode", MODES)
def test_no_subprocesses_or_ctypes(mode):
    assert not run_python("import subprocess\nsubprocess.run(['true'])", FAST, isolation=mode).passed
    assert not run_python("import os\nos.system('true')", FAST, isolation=mode).passed
    assert not run_python("import ctypes\nctypes.CDLL(None).fork()", FAST, isolation=mode).passed


# --- SQL ---------------------------------------------------------------------------------------

@pytest.fixture()
def database(tmp_path):
    from harness.tasks.base import TASKS_DIR

    db = tmp_path / "pets_1.sqlite"
    shutil.copy(TASKS_DIR / "spider/database/pets_1/pets_1.sqlite", db)
    return db


@pytest.mark.parametrize("sql", [
    "INSERT INTO Student(StuID) VALUES (1)", "DELETE FROM Student", "UPDATE Student SET Age = 0",
    "DROP TABLE Student", "CREATE TABLE t(a)", "CREATE TEMP TABLE t(a)", "CREATE VIEW v AS SELECT 1",
    "ALTER TABLE Student ADD COLUMN x", "ATTACH DATABASE '{tmp}/other.db' AS other", "VACUUM INTO '{tmp}/copy.db'",
    "PRAGMA query_only = OFF", "PRAGMA journal_mode = DELETE", "SELECT load_extension('x')", "BEGIN",
    "SELECT 1; DROP TABLE Student",
])
def test_sql_cannot_modify_attach_or_create(database, sql):
    before = hashlib.sha256(database.read_bytes()).hexdigest()
    with pytest.raises(QueryError):
        readonly_query(database, sql.format(tmp=database.parent))
    assert hashlib.sha256(database.read_bytes()).hexdigest() == before
    assert sorted(p.name for p in database.parent.iterdir()) == ["pets_1.sqlite"]


def test_sql_time_and_size_limits(database):
    with pytest.raises(QueryError, match="interrupted"):  # an endless query: only its deadline ends it
        readonly_query(database, "WITH RECURSIVE c(x) AS (SELECT 1 UNION ALL SELECT x + 1 FROM c) "
                                 "SELECT count(*) FROM c", timeout_s=0.5)
    with pytest.raises(QueryError):
        readonly_query(database, "SELECT zeroblob(100000000)")
    with pytest.raises(QueryError, match="rows"):
        readonly_query(database, "SELECT * FROM Student a, Student b, Student c", max_rows=1000)
    assert readonly_query(database, "SELECT count(*) FROM Student") == [(34,)]


@pytest.mark.parametrize("function", ["fts3_tokenizer('simple')", "zeroblob(10)", "randomblob(10)", "printf('%.*c', 9, 'x')",
                                      "hex('a')", "char(65)", "sqlite_version()", "load_extension('x')",
                                      "json_array(1)", "unicode('a')", "random()"])
def test_sql_functions_spider_does_not_need_are_refused(database, function):
    with pytest.raises(QueryError, match="not authorized"):
        readonly_query(database, f"SELECT {function}")


def test_sql_functions_spider_needs_still_work(database):
    assert readonly_query(database, "SELECT count(*), max(Age), min(Age), sum(Age) > 0, avg(Age) > 0 FROM Student "
                                    "WHERE lower(Fname) LIKE 'l%' OR upper(LName) = 'SMITH'")[0][0] >= 1
    assert readonly_query(database, "SELECT abs(-2), round(2.5), length('abc'), substr('abc', 2), trim(' a '), "
                                    "coalesce(NULL, 1), instr('abc', 'c'), replace('a;b', ';', ',')") == [
        (2, 3.0, 3, "bc", "a", 1, 3, "a,b")]
    assert readonly_query(database, "SELECT x'00ff'") == [(b"\x00\xff",)]  # blobs cross intact


# one call of instr() on two strings of millions of characters: SQLite never reaches its progress
# handler (checked between VM steps), so only the worker's kill stops it (issue: 173 s against 5 s)
_MILLION = "'a'"
for _ in range(6):
    _MILLION = f"replace({_MILLION}, 'a', 'aaaaaaaaaa')"  # ×10 per call: a million a's in six calls
PATHOLOGICAL = f"WITH s(v) AS (SELECT {_MILLION}) SELECT instr(v || v, v || 'b') FROM s"


def test_a_query_stuck_inside_one_function_call_is_killed(database):
    import resource

    rss_before = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
    with pytest.raises(QueryKilled, match="killed: the query ran past its 1 s limit"):  # the deadline's kill, by name
        readonly_query(database, PATHOLOGICAL, timeout_s=1.0)
    assert resource.getrusage(resource.RUSAGE_SELF).ru_maxrss - rss_before < 50_000  # KiB: not in this process
    assert readonly_query(database, "SELECT count(*) FROM Student") == [(34,)]  # a fresh worker serves the next


def test_a_query_over_its_memory_limit_fails(database):
    pad = "a" * 2000
    sql = (f"WITH RECURSIVE c(x) AS (SELECT 1 UNION ALL SELECT x + 1 FROM c WHERE x < 400000) "
           f"SELECT count(*) FROM (SELECT DISTINCT x || '{pad}' FROM c)")
    with pytest.raises(QueryError, match="memory|killed"):
        readonly_query(database, sql, timeout_s=30.0)
    assert readonly_query(database, "SELECT count(*) FROM Student") == [(34,)]


@pytest.mark.parametrize("sql,first", [
    ("SELECT 1; DROP TABLE t", "SELECT 1"),
    ("SELECT name FROM t WHERE name = 'a;b'; SELECT 2", "SELECT name FROM t WHERE name = 'a;b'"),
    ('SELECT "odd;name" FROM t;', 'SELECT "odd;name" FROM t'),
    ("SELECT 1 -- a comment; still a comment\n, 2; x", "SELECT 1 -- a comment; still a comment\n, 2"),
    ("SELECT 1 /* ; */ + 1", "SELECT 1 /* ; */ + 1"),
    ("SELECT 'never closed; ", "SELECT 'never closed; "),
])
def test_statements_are_split_by_sqlite_not_on_semicolons(sql, first):
    assert first_statement(sql) == first


# --- through the Spider task ---------------------------------------------------------------------

def _spider(**overrides):
    import yaml

    from harness.tasks import load_task

    conf = Path(__file__).resolve().parents[2] / "conf" / "dataset" / "spider.yaml"
    task = load_task({**yaml.safe_load(conf.read_text()), "num_prompts": None, **overrides})
    return task, {ex.reference: ex for ex in task.examples() if "unscorable" not in ex.meta}


def test_spider_scores_a_query_with_a_semicolon_inside_a_literal():
    task, by_gold = _spider()
    example = by_gold["SELECT avg(age) ,  min(age) ,  max(age) FROM singer WHERE country  =  'France'"]
    output = " avg(age), min(age), max(age) FROM singer WHERE country = 'France' OR country = 'Fr;ance'; SELECT 1"
    assert task.truncate(output) == output[:-len("; SELECT 1")]
    assert task.score(example, task.truncate(output)) == {"execution_accuracy": 1.0, "flag_query_killed": 0.0}


def test_spider_counts_a_killed_query_as_wrong_and_flags_it(caplog):
    task, by_gold = _spider(timeout_s=1.0)
    example = next(iter(by_gold.values()))
    assert task.score(example, PATHOLOGICAL) == {"execution_accuracy": 0.0, "flag_query_killed": 1.0}
    assert "killed: the query ran past its 1 s limit" in caplog.text
    assert task.score(example, example.reference)["execution_accuracy"] == 1.0


def _children_mentioning(text: str) -> list[int]:
    """Direct children of this process whose command line holds ``text``."""
    found = []
    for pid in processes_mentioning(text):
        try:
            if int(Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[1]) == os.getpid():
                found.append(int(pid))
        except (OSError, IndexError, ValueError):
            continue
    return found


@pytest.mark.parametrize("mode", MODES)
def test_the_program_dies_with_its_checker(mode):
    """Killed from outside (the harness's own time limit, the OOM killer), the checker takes the
    program with it — though the program's uid change cleared its own parent-death signal."""
    import threading

    before = set(processes_mentioning("harness-sandbox-"))
    results = []
    runner = threading.Thread(target=lambda: results.append(
        run_python("import time\ntime.sleep(120)", PythonLimits(timeout_s=60.0), isolation=mode)))
    runner.start()
    deadline = time.monotonic() + 30
    while not (set(processes_mentioning("harness-sandbox-")) - before) and time.monotonic() < deadline:
        time.sleep(0.1)
    time.sleep(1.0)  # the program is past its setup, asleep
    program = set(processes_mentioning("harness-sandbox-")) - before
    [checker] = _children_mentioning("harness.sandbox.checker")
    os.kill(checker, 9)
    runner.join(60)
    assert results and not results[0].passed and "no verdict" in results[0].reason
    deadline = time.monotonic() + 10
    while set(processes_mentioning("harness-sandbox-")) & program and time.monotonic() < deadline:
        time.sleep(0.1)
    assert program and not set(processes_mentioning("harness-sandbox-")) & program


def test_a_query_sqlite_stops_at_its_deadline_is_flagged_as_killed(caplog):
    """Issue 31.6: SQLite's own deadline (its progress handler) ends a long query as 'interrupted': a killed
    query too, flagged and logged, never a plain wrong answer."""
    task, by_gold = _spider(timeout_s=0.5)
    example = next(iter(by_gold.values()))
    endless = " count(*) FROM (WITH RECURSIVE c(x) AS (SELECT 1 UNION ALL SELECT x + 1 FROM c) SELECT x FROM c)"
    with caplog.at_level("WARNING"):
        assert task.score(example, endless) == {"execution_accuracy": 0.0, "flag_query_killed": 1.0}
    assert "stopped (interrupted by SQLite): the query ran past its 0.5 s limit" in caplog.text
