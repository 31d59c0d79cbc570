"""The fallback (no namespaces: clusters often refuse ``unshare``) holds against what used to get
through it (issue 15, item 7), and so does namespaces mode: ``dir_fd`` escapes, sqlite files
elsewhere, the harness's environment through ``/proc``, and the holes an audit-hook sandbox
leaves (C extensions, sub-interpreters, crafted bytecode, lying path objects, terminals, shared
memory...). Each program makes many attempts and prints ``denied <name>`` or ``ESCAPED <name>``;
the test checks every attempt was denied and nothing outside changed. Also: every run and record
says which isolation was in force, and HumanEval refuses weaker isolation unless opted in."""
import hashlib
import json
import os
import socket
import sys
from pathlib import Path

import pytest
import yaml

from harness.errors import ConfigError
from harness.sandbox import FORCE_ENV, PythonLimits, isolation_in_force, isolation_layers, run_python
from harness.tasks import load_task
from test_sandbox import KERNEL_LAYERS, MODES, process_with_secret

FAST = PythonLimits(timeout_s=5.0)
SECRET = "harness-test-secret-93ab"
CONF = Path(__file__).resolve().parents[1] / "harness" / "conf" / "dataset"

PRELUDE = '''
import os, sys
OUT = {outside!r}
def attempt(name, action):
    try:
        action()
    except BaseException as e:
        print("denied", name, type(e).__name__, str(e)[:120].replace("\\n", " "))
    else:
        print("ESCAPED", name)
'''

FILES = '''
import shutil, sqlite3, mmap, dbm
attempt("open a directory outside (for dir_fd)", lambda: os.open(OUT, os.O_RDONLY))
attempt("O_PATH on a directory outside", lambda: os.open(OUT, os.O_PATH))
attempt("O_DIRECTORY on the parent", lambda: os.open("..", os.O_RDONLY | os.O_DIRECTORY))
here = os.open(".", os.O_RDONLY)  # its own folder: allowed
attempt("create relative to a dir_fd outside (issue 15)",
        lambda: os.close(os.open("via_dirfd.txt", os.O_WRONLY | os.O_CREAT, dir_fd=os.open(OUT, os.O_RDONLY))))
attempt("create relative to dir_fd, climbing", lambda: os.open("../x", os.O_WRONLY | os.O_CREAT, dir_fd=here))
open("mine.txt", "w").write("mine")
attempt("rename with a dst_dir_fd outside (issue 15)",
        lambda: os.rename("mine.txt", "renamed.txt", dst_dir_fd=os.open(OUT, os.O_RDONLY)))
attempt("rename with dst_dir_fd, climbing", lambda: os.rename("mine.txt", "../stolen.txt", dst_dir_fd=here))
attempt("rename into the folder outside", lambda: os.rename("mine.txt", OUT + "/stolen.txt"))
attempt("sqlite3.connect elsewhere", lambda: sqlite3.connect(OUT + "/elsewhere.db").execute("create table t(a)"))
attempt("sqlite3 ATTACH from memory", lambda: sqlite3.connect(":memory:").execute(f"ATTACH '{{OUT}}/a.db' AS a"))
attempt("sqlite3 VACUUM INTO", lambda: sqlite3.connect(":memory:").execute(f"VACUUM INTO '{{OUT}}/v.db'"))
attempt("chdir outside", lambda: os.chdir(OUT))
attempt("chdir to the parent", lambda: os.chdir(".."))
attempt("symlink to outside", lambda: os.symlink(OUT + "/file.txt", "link"))
attempt("hard link to outside", lambda: os.link(OUT + "/file.txt", "hard"))
attempt("mkfifo outside (no audit event)", lambda: os.mkfifo(OUT + "/fifo"))
attempt("mknod a regular file outside (no audit event)", lambda: os.mknod(OUT + "/node"))
attempt("write /proc/self/mem", lambda: open("/proc/self/mem", "r+b"))
attempt("reopen via /proc/self/fd for writing",
        lambda: open("/proc/self/fd/%d" % os.open(OUT + "/file.txt", os.O_RDONLY), "w").write("x"))
attempt("chmod through a read-only fd", lambda: os.chmod(os.open(OUT + "/file.txt", os.O_RDONLY), 0o777))
attempt("mmap for writing a read-only file",
        lambda: mmap.mmap(os.open(OUT + "/file.txt", os.O_RDONLY), 0, access=mmap.ACCESS_WRITE).write(b"x"))
attempt("shutil.copy to outside", lambda: shutil.copy("mine.txt", OUT + "/copied.txt"))
attempt("shutil.move to outside", lambda: shutil.move("mine.txt", OUT + "/moved.txt"))
attempt("shutil.rmtree outside", lambda: shutil.rmtree(OUT))
attempt("dbm.open outside", lambda: dbm.open(OUT + "/db", "c"))
class Liar:  # a path that is inside when checked and outside when used
    calls = 0
    def __fspath__(self):
        Liar.calls += 1
        return "inside.txt" if Liar.calls == 1 else OUT + "/lied.txt"
os.close(os.open(Liar(), os.O_WRONLY | os.O_CREAT))  # converted once, then audited and used as one string
Liar.calls = 0
open(Liar(), "w").write("x")
print("the lying path landed inside:", os.path.exists("inside.txt"))
class Sly(str):
    def startswith(self, *a): return True
    def __contains__(self, x): return False
attempt("str subclass with lying methods", lambda: open(Sly(OUT + "/sly.txt"), Sly("w")).write("x"))
attempt("tamper with the audit hook", lambda: [setattr(o, "__defaults__", None) for o in __import__("gc").get_objects()
                                               if type(o).__name__ == "function" and o.__name__ == "_guard"] or 1 / 0)
attempt("open a terminal", lambda: open("/dev/tty", "rb"))
attempt("TIOCSTI on stdin", lambda: __import__("fcntl").ioctl(0, 0x5412, b"x"))
'''

PROCESSES = '''
import signal
attempt("os.fork", lambda: os.fork())
attempt("posix_spawn", lambda: os.posix_spawn("/bin/true", ["true"], {{}}))
attempt("os.execv", lambda: os.execv("/bin/true", ["true"]))
attempt("os.system", lambda: os.system("true"))
attempt("subprocess", lambda: __import__("subprocess").run(["true"]))
attempt("pty.fork", lambda: __import__("pty").fork())
attempt("_posixsubprocess", lambda: __import__("_posixsubprocess"))
attempt("ctypes", lambda: __import__("ctypes"))
attempt("_ctypes by file path", lambda: __import__("importlib.util").util.module_from_spec(
    __import__("importlib.util").util.spec_from_file_location("_ctypes", {ctypes_path!r})))
attempt("third-party C extension", lambda: __import__("importlib.util").util.module_from_spec(
    __import__("importlib.util").util.spec_from_file_location("_psutil_linux", {extension_path!r})))
attempt("sub-interpreter without the hook", lambda: __import__("_xxsubinterpreters"))
attempt("_testcapi", lambda: __import__("_testcapi"))
attempt("crafted code object", lambda: (lambda: 0).__code__.replace(co_code=b"d\\xff\\x00S"))
attempt("marshal.loads crafted bytes", lambda: __import__("marshal").loads(__import__("marshal").dumps(
    compile("1", "x", "eval"))))
def pyc_from_tmp():
    import importlib.machinery, py_compile
    open("mod.py", "w").write("x = 1")
    py_compile.compile("mod.py", cfile="mod.pyc")
    importlib.machinery.SourcelessFileLoader("mod", os.path.abspath("mod.pyc")).load_module()
attempt("bytecode written in its folder", pyc_from_tmp)
attempt("kill the checker", lambda: os.kill(os.getppid(), signal.SIGKILL))
attempt("pidfd signal to the checker", lambda: signal.pidfd_send_signal(os.pidfd_open(os.getppid()), signal.SIGKILL))
attempt("signal every process", lambda: os.kill(-1, 0))
attempt("raise its limits", lambda: __import__("resource").setrlimit(__import__("resource").RLIMIT_CPU, (-1, -1)))
attempt("shared memory in /dev/shm", lambda: __import__("multiprocessing.shared_memory").shared_memory.SharedMemory(
    name="harness_escape", create=True, size=16))
attempt("readline history file", lambda: __import__("readline").write_history_file(OUT + "/history"))
attempt("ssl key log file", lambda: __import__("ssl"))
attempt("tcp socket", lambda: __import__("socket").create_connection(("127.0.0.1", 9), timeout=1))
attempt("unix socket to a listening server", lambda: __import__("socket").socket(__import__("socket").AF_UNIX))
attempt("syslog", lambda: __import__("syslog").syslog("x"))
'''

SECRETS = '''
for path in ("/proc/{harness}/environ", "/proc/{harness}/cmdline", "/proc/{harness}/fd/1",
             "/proc/self/root/proc/{harness}/environ", "/proc/%d/environ" % os.getppid(),
             "/proc/%d/mem" % os.getppid()):
    attempt("read " + path, lambda: print(open(path, "rb").read()[:4000]))
print("own environment", dict(os.environ))
'''


def _listing(folder: Path) -> dict[str, str]:
    return {p.name: hashlib.sha256(p.read_bytes()).hexdigest() for p in sorted(folder.iterdir()) if p.is_file()}


@pytest.fixture()
def outside(tmp_path):
    folder = tmp_path / "outside"
    folder.mkdir()
    (folder / "file.txt").write_text("precious")
    return folder


# "hook only": the fallback on a kernel without seccomp and Landlock (old cluster kernels), simulated
ESCAPE_MODES = [*MODES, "hook only"]


@pytest.fixture()
def hook_only(monkeypatch):
    from harness import sandbox

    monkeypatch.setitem(sandbox._PROBES, "landlock", 0)
    monkeypatch.setitem(sandbox._PROBES, "seccomp", False)
    assert "seccomp" not in isolation_layers("fallback") and "landlock" not in " ".join(isolation_layers("fallback"))


def _run(program: str, outside: Path, mode: str, guard: bool = True, request=None, harness: int = 0):
    import _ctypes
    import psutil._psutil_linux

    if mode == "hook only":
        request.getfixturevalue("hook_only")
        mode = "fallback"

    source = (PRELUDE + program).format(outside=str(outside), harness=harness, ctypes_path=_ctypes.__file__,
                                        extension_path=psutil._psutil_linux.__file__)
    return run_python(source, FAST, audit_guard=guard, isolation=mode)


def _attempts(result) -> tuple[list[str], list[str]]:
    lines = result.stdout.splitlines()
    return ([line for line in lines if line.startswith("denied ")], [line for line in lines if line.startswith("ESCAPED")])


@pytest.mark.parametrize("mode", ESCAPE_MODES)
def test_files_stay_inside_its_folder(outside, mode, request):
    before = _listing(outside)
    result = _run(FILES, outside, mode, request=request)
    denied, escaped = _attempts(result)
    assert result.passed, result.stderr[-2000:]
    assert escaped == [] and len(denied) == FILES.count("attempt("), result.stdout
    assert "the lying path landed inside: True" in result.stdout
    assert _listing(outside) == before
    assert not Path("/dev/shm/harness_escape").exists()


@pytest.mark.parametrize("mode", ESCAPE_MODES)
def test_no_processes_native_code_or_signals(outside, mode, request):
    with socket.socket(socket.AF_UNIX) as server:
        server.bind(str(outside.parent / "server.sock"))
        server.listen(1)
        program = PROCESSES.replace('socket(__import__("socket").AF_UNIX))',
                                    f'socket(__import__("socket").AF_UNIX).connect({str(outside.parent / "server.sock")!r}))')
        result = _run(program, outside, mode, request=request)
        server.setblocking(False)
        with pytest.raises(BlockingIOError):
            server.accept()
    denied, escaped = _attempts(result)
    assert result.passed, result.stderr[-2000:]  # the checker survived the signals: a verdict came back
    assert escaped == [] and len(denied) == PROCESSES.count("attempt("), result.stdout
    assert not Path("/dev/shm/harness_escape").exists() and _listing(outside) == {
        "file.txt": hashlib.sha256(b"precious").hexdigest()}


@pytest.mark.parametrize("mode", ESCAPE_MODES)
def test_the_harness_environment_stays_secret(outside, mode, request):
    with process_with_secret(SECRET) as harness:
        result = _run(SECRETS, outside, mode, request=request, harness=harness)
    denied, escaped = _attempts(result)
    assert result.passed, result.stderr[-2000:]
    assert escaped == [] and len(denied) == 6, result.stdout
    assert SECRET not in result.stdout + result.stderr
    own = json.loads(result.stdout.split("own environment ", 1)[1].replace("'", '"'))
    assert set(own) == {"PATH", "HOME", "TMPDIR", "LANG"}  # scrubbed: nothing of the harness's


@pytest.mark.skipif(not KERNEL_LAYERS, reason="this kernel/libc has no seccomp + Landlock: the hook is the fallback's guard")
def test_fallback_kernel_layers_hold_without_the_audit_hook(outside):
    """Native code gets past any audit hook (here: the hook is off and ctypes makes raw calls);
    seccomp and Landlock still stop it."""
    program = '''
import ctypes, errno, sqlite3
libc = ctypes.CDLL(None, use_errno=True)
def raw(name, result):
    if result == -1:
        print("denied", name, errno.errorcode.get(ctypes.get_errno()))
    else:
        print("ESCAPED", name)
raw("fork", libc.fork())
raw("execve", libc.execve(b"/bin/true", None, None))
raw("socket", libc.socket(2, 1, 0))
raw("kill the checker", libc.kill(os.getppid(), 0))
raw("ptrace", libc.ptrace(16, os.getppid(), None, None))
raw("mknod outside (no audit event)", libc.mknod((OUT + "/node").encode(), 0o100644, 0))
raw("open outside for writing", libc.open((OUT + "/raw.txt").encode(), os.O_WRONLY | os.O_CREAT, 0o644))
fd = os.open(OUT, os.O_RDONLY)  # the hook is off: a directory fd outside is easy to get
raw("create relative to dir_fd", libc.openat(fd, b"dirfd.txt", os.O_WRONLY | os.O_CREAT, 0o644))
raw("rename into dir_fd", libc.renameat(-100, b"mine.txt", fd, b"stolen.txt") if open("mine.txt", "w") else 0)
raw("read the harness environment", libc.open(b"/proc/{harness}/environ", os.O_RDONLY))
attempt("sqlite3.connect elsewhere", lambda: sqlite3.connect(OUT + "/elsewhere.db").execute("create table t(a)"))
'''
    before = _listing(outside)
    with process_with_secret(SECRET) as harness:
        result = _run(program, outside, "fallback", guard=False, harness=harness)
    denied, escaped = _attempts(result)
    assert result.passed, result.stderr[-2000:]
    assert escaped == [] and len(denied) == 11, result.stdout
    assert _listing(outside) == before and SECRET not in result.stdout


def test_every_run_records_its_isolation_and_layers(monkeypatch):
    fallback = run_python("pass", FAST, isolation="fallback")
    assert fallback.isolation == "fallback" and fallback.layers == isolation_layers("fallback")
    assert "audit hook" in fallback.layers and ("seccomp" in fallback.layers) == KERNEL_LAYERS or not KERNEL_LAYERS
    monkeypatch.setenv(FORCE_ENV, "fallback")
    assert isolation_in_force() == "fallback" and run_python("pass", FAST).isolation == "fallback"
    monkeypatch.setenv(FORCE_ENV, "off")
    with pytest.raises(ConfigError, match=f"{FORCE_ENV}='off'. Valid: auto, fallback"):
        isolation_in_force()


def _humaneval(**overrides):
    return load_task({**yaml.safe_load((CONF / "humaneval.yaml").read_text()), "num_prompts": 1, **overrides})


def test_humaneval_refuses_weaker_isolation_unless_opted_in(monkeypatch):
    monkeypatch.setenv(FORCE_ENV, "fallback")
    with pytest.raises(ConfigError, match=r"dataset.min_isolation='namespaces' but only 'fallback'.*"
                                          r"set dataset.min_isolation=fallback"):
        _humaneval()
    with pytest.raises(ConfigError, match="dataset.min_isolation='none'. Valid: namespaces, fallback"):
        _humaneval(min_isolation="none")
    task = _humaneval(min_isolation="fallback", timeout_s=3.0)
    [example] = task.examples()
    assert example.meta["isolation"] == "fallback" and "audit hook" in example.meta["sandbox_layers"]
    assert task.score(example, example.reference["canonical_solution"])["pass@1"] == 1.0


def test_spider_records_its_isolation():
    spider = load_task({**yaml.safe_load((CONF / "spider.yaml").read_text()), "num_prompts": 2})
    assert {e.meta["isolation"] for e in spider.examples()} == {"sqlite-readonly"}


def test_records_carry_isolation_and_flags(tiny_pair, tmp_path, monkeypatch):
    """Through the runner: every HumanEval record says which isolation was in force, and flags."""
    from harness.runner import run_cell
    from harness.store import read_records

    monkeypatch.setenv(FORCE_ENV, "fallback")
    cfg = {"method": {"name": "ar_greedy"}, "pair": yaml.safe_load((CONF.parent / "pair" / "tiny.yaml").read_text()),
           "dataset": {**yaml.safe_load((CONF / "humaneval.yaml").read_text()), "num_prompts": 1,
                       "min_isolation": "fallback", "timeout_s": 3.0},
           "gpu": yaml.safe_load((CONF.parent / "gpu" / "cpu.yaml").read_text()),
           "energy": {"name": "off", "source": "none"}, "seed": 0, "max_new_tokens": 4,
           "runner": {"warmup_generations": 0, "progress": False}}
    outcome = run_cell(cfg, tmp_path)
    assert outcome.status == "done", outcome.error
    [record] = read_records(outcome.cell_dir)
    assert record["meta.isolation"] == "fallback" and "seccomp" in record["meta.sandbox_layers"] or not KERNEL_LAYERS
    assert record["metric.pass@1"] in (0.0, 1.0) and record["metric.suspicious"] in (0.0, 1.0)
    assert {k for k in record if k.startswith("metric.flag_")} == {
        "metric.flag_dunder", "metric.flag_patch", "metric.flag_introspect", "metric.flag_nonplain"}
    assert sys.modules.get("harness.sandbox") is not None
