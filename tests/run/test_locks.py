"""Per-cell lock (issue 15 items 5 and 8): two processes given one cell never both run it; stale locks
left by a killed process are detected and taken over; only the lock holder writes into the cell."""
import json
import os
import socket
import subprocess
import sys
import time

import pytest

from cellproc import CELL, outcomes, partial_lines, start
from harness.results import store
from harness.run.runner import prepare_cell, run_cell


def _cell_dir(tmp_path):
    return prepare_cell(CELL, tmp_path)[2]


def _check_one_writer(cell_dir):
    assert (cell_dir / store.SUMMARY).exists() and not (cell_dir / store.ERROR).exists()
    summary = json.loads((cell_dir / store.SUMMARY).read_text())
    assert len(summary["segments"]) == 1  # one process ran it, start to end
    assert store.finished_state(cell_dir)[0] == "done"
    assert [r["index"] for r in store.read_records(cell_dir)] == list(range(CELL["dataset"]["num_prompts"]))


@pytest.mark.slow  # whole processes / CLI sweeps (issue 21.10: `make test` in minutes; CI runs -m slow too)
def test_second_process_on_a_running_cell_is_busy_and_writes_nothing(tmp_path):
    cfg = json.loads(json.dumps(CELL))
    cfg["dataset"]["num_prompts"] = 6
    cell_dir = prepare_cell(cfg, tmp_path)[2]
    first = start([cfg], tmp_path)
    deadline = time.time() + 240
    while partial_lines(cell_dir) < 1 and time.time() < deadline and first.poll() is None:
        time.sleep(0.02)
    assert partial_lines(cell_dir) >= 1, "the first process never started writing"
    assert store.lock_state(cell_dir)["pid"] == first.pid
    second = start([cfg], tmp_path)
    o2 = outcomes(second)
    o1 = outcomes(first)
    assert [o["status"] for o in o1] == ["done"]
    assert [o["status"] for o in o2] in (["busy"], ["skipped"])  # skipped only if the first had finished already
    summary = json.loads((cell_dir / store.SUMMARY).read_text())
    assert len(summary["segments"]) == 1 and summary["records_count"] == 6
    assert not (cell_dir / store.ERROR).exists()


@pytest.mark.slow  # whole processes / CLI sweeps (issue 21.10: `make test` in minutes; CI runs -m slow too)
def test_two_processes_started_together_run_the_cell_once(tmp_path):
    procs = [start([CELL], tmp_path) for _ in range(2)]
    statuses = sorted(o["status"] for p in procs for o in outcomes(p))
    assert statuses.count("done") == 1 and statuses in (["busy", "done"], ["done", "skipped"])
    _check_one_writer(_cell_dir(tmp_path))


def test_stale_flock_lock_from_a_dead_process_is_taken_over(tmp_path, caplog):
    cell_dir = _cell_dir(tmp_path)
    cell_dir.mkdir(parents=True)
    dead = subprocess.run([sys.executable, "-c", "import os; print(os.getpid())"], capture_output=True, text=True)
    (cell_dir / store.LOCK).write_text(json.dumps({"host": socket.gethostname(), "pid": int(dead.stdout)}))
    assert store.lock_state(cell_dir) is None  # nobody holds it
    with caplog.at_level("WARNING", logger="harness"):
        assert run_cell(CELL, tmp_path).status == "done"
    assert "stale lock" in caplog.text
    _check_one_writer(cell_dir)
    assert (cell_dir / store.LOCK).read_text() == ""  # released cleanly


def test_lock_reports_its_owner_and_refuses_a_second_holder(tmp_path):
    cell_dir = tmp_path / "c"
    with store.CellLock(cell_dir):
        assert store.lock_state(cell_dir)["pid"] == os.getpid()
        with pytest.raises(store.CellBusy, match=f"pid {os.getpid()}"):
            store.CellLock(cell_dir).acquire()
    assert store.lock_state(cell_dir) is None
    store.CellLock(cell_dir).acquire().release()


def test_excl_fallback_detects_stale_and_live_owners(tmp_path):
    cell_dir = tmp_path / "c"
    cell_dir.mkdir()
    lock = cell_dir / store.LOCK
    sleeper = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(60)"])
    try:
        lock.write_text(json.dumps({"host": socket.gethostname(), "pid": sleeper.pid}))
        with pytest.raises(store.CellBusy):
            store.CellLock(cell_dir, mode="excl").acquire()  # a live owner on this host
    finally:
        sleeper.kill()
        sleeper.wait()
    taken = store.CellLock(cell_dir, mode="excl").acquire()  # its pid is gone: stale
    assert taken.took_over["pid"] == sleeper.pid
    with pytest.raises(store.CellBusy):
        store.CellLock(cell_dir, mode="excl").acquire()
    taken.release()
    assert not lock.exists()
    lock.write_text(json.dumps({"host": "elsewhere", "pid": 1}))  # another host: judged by its heartbeat
    with pytest.raises(store.CellBusy):
        store.CellLock(cell_dir, mode="excl", stale_after_s=3600).acquire()
    old = time.time() - 7200
    os.utime(lock, (old, old))
    store.CellLock(cell_dir, mode="excl", stale_after_s=3600).acquire().release()


def test_flock_unsupported_falls_back_to_excl(tmp_path, monkeypatch):
    import errno
    import fcntl

    def nosys(fd, op):
        raise OSError(errno.ENOSYS, "flock not supported")
    monkeypatch.setattr(fcntl, "flock", nosys)
    lock = store.CellLock(tmp_path / "c").acquire()
    assert lock.mode == "excl" and json.loads((tmp_path / "c" / store.LOCK).read_text())["pid"] == os.getpid()
    lock.release()


# --- planted files in a cell folder (issue 31.3): never followed, never waited on, a corrupt cell ---

def _bounded(call, seconds: float = 20.0):
    """``call()`` in a daemon thread: its result, or AssertionError when it hangs (a FIFO read)."""
    import threading

    box = []
    thread = threading.Thread(target=lambda: box.append(call()), daemon=True)
    thread.start()
    thread.join(seconds)
    assert not thread.is_alive(), f"{call} hung"
    return box[0] if box else None


def _plant(path, what: str, target):
    if what == "symlink":
        os.symlink(target, path)
    else:
        os.mkfifo(path)


@pytest.mark.parametrize("mode", ["flock", "excl"])
@pytest.mark.parametrize("what", ["symlink", "fifo"])
def test_a_planted_lock_is_never_followed_or_waited_on(tmp_path, mode, what, caplog):
    outside = tmp_path / "outside.txt"
    outside.write_text("precious")
    cell_dir = tmp_path / "c"
    cell_dir.mkdir()
    _plant(cell_dir / store.LOCK, what, outside)
    assert _bounded(lambda: store.lock_state(cell_dir)) is None  # nobody's lock
    with caplog.at_level("WARNING", logger="harness"):
        lock = _bounded(lambda: store.CellLock(cell_dir, mode=mode).acquire())
    assert "not a lock file: moved aside" in caplog.text
    assert json.loads((cell_dir / store.LOCK).read_text())["pid"] == os.getpid()
    lock.heartbeat()
    lock.release()
    assert outside.read_text() == "precious"


@pytest.mark.parametrize("name", [store.PARTIAL, store.DIGESTS])
@pytest.mark.parametrize("resume", [False, True])
def test_planted_record_files_are_never_written_through(tmp_path, name, resume, caplog):
    outside = tmp_path / "outside.txt"
    outside.write_text("precious\n")
    cell_dir = tmp_path / "c"
    cell_dir.mkdir()
    os.symlink(outside, cell_dir / name)
    with caplog.at_level("WARNING", logger="harness"):
        writer = _bounded(lambda: store.RecordWriter(cell_dir, resume=resume))
        writer.write({"index": 0, "cell_id": "c"})
        writer.commit()
    assert outside.read_text() == "precious\n" and "treated as a corrupt cell" in caplog.text
    assert not (cell_dir / name).is_symlink()


@pytest.mark.parametrize("name", [store.SUMMARY, store.RECORDS])
def test_a_finished_cell_with_a_planted_file_is_corrupt_and_repaired_without_reading_through(tmp_path, name):
    outside = tmp_path / "outside.txt"
    outside.write_text('{"secret": 1}\n')
    cell_dir = tmp_path / "c"
    cell_dir.mkdir()
    (cell_dir / store.SUMMARY).write_text("{}")
    (cell_dir / store.RECORDS).write_text("")
    (cell_dir / name).unlink()
    os.symlink(outside, cell_dir / name)
    state, detail = store.finished_state(cell_dir)
    assert state == "corrupt" and f"{name} is a symbolic link" in detail
    store.reopen_corrupt(cell_dir, detail)
    assert outside.read_text() == '{"secret": 1}\n'
    assert not any("secret" in p.read_text() for p in cell_dir.iterdir() if p.is_file() and not p.is_symlink())
