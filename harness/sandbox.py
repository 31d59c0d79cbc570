"""Running model-generated code safely: Python in a locked-down subprocess, SQL on a read-only
connection. Standard library only: this file is also the sandboxed interpreter's entry script.

Python (:func:`run_python`) — layers, each covering what the others may miss:

1. the program gets its own temporary directory (cwd, ``HOME``, ``TMPDIR``), an isolated
   interpreter (``-I``), a new session, resource limits (CPU seconds, address space, file size,
   open files, processes), a wall-clock timeout after which its whole process group is killed;
2. where ``unshare`` works (root, or unprivileged user namespaces), new network, PID, IPC and
   mount namespaces: no network interface but a down loopback, every process dies with the
   program, every mount read-only except the temporary directory, then all capabilities dropped
   (so the program cannot remount, re-enter the host's namespaces, or raise its limits);
3. inside the interpreter, an audit hook (PEP 578, cannot be removed) denies sockets, new
   processes (fork, exec, spawn, subprocess), signals to other processes, ctypes, resource-limit
   changes, and file writes, deletions, renames and links outside the temporary directory
   (so packages that load ctypes, numpy among them, cannot be imported).

A run passes only if the program finishes normally: the entry prints a nonce (sent on stdin)
after the program returns, so ``os._exit(0)`` or ``sys.exit(0)`` from the program is a failure.
The process limit (``RLIMIT_NPROC``) binds non-root users only: the kernel exempts uid 0, where
layers 2-3 stop fork bombs. Without namespaces (``unshare`` refused) layers 1 and 3 remain.

SQL (:func:`readonly_query`): sqlite URI ``mode=ro``, ``PRAGMA query_only``, an authorizer that
allows only reads (no ATTACH, CREATE, writes, PRAGMA, transactions), a value-size limit, a
row-count cap, and a time limit enforced by a progress handler.
"""
from __future__ import annotations

import os
import re
import resource
import sys
from dataclasses import dataclass
from pathlib import Path

SANDBOX_TAG = "harness-sandbox-"


@dataclass(frozen=True)
class PythonLimits:
    timeout_s: float = 10.0
    memory_mb: int = 1024
    max_processes: int = 16  # beyond the user's current tasks; uid 0 is exempt (kernel rule)
    max_file_mb: int = 16
    max_open_files: int = 128


@dataclass
class RunResult:
    passed: bool  # the program ran to its end: no exception, exit, kill or timeout
    returncode: int | None
    timed_out: bool
    stdout: str
    stderr: str


def _unshare_command() -> list[str]:
    cmd = ["unshare", "--mount", "--net", "--pid", "--ipc", "--fork", "--kill-child", "--mount-proc"]
    return cmd if os.geteuid() == 0 else [cmd[0], "--user", "--map-root-user", *cmd[1:]]


_NAMESPACES: list[bool] = []


def namespaces_available() -> bool:
    """Whether ``unshare`` can isolate a program here (probed once per process)."""
    if not _NAMESPACES:
        import subprocess

        try:
            probe = subprocess.run([*_unshare_command(), sys.executable, "-I", "-c", "pass"],
                                   stdin=subprocess.DEVNULL, capture_output=True, timeout=30)
            _NAMESPACES.append(probe.returncode == 0)
        except (OSError, subprocess.TimeoutExpired):
            _NAMESPACES.append(False)
    return _NAMESPACES[0]


def _user_tasks(uid: int) -> int:
    """Processes and threads of ``uid`` now (what ``RLIMIT_NPROC`` counts)."""
    count = 0
    for status in Path("/proc").glob("[0-9]*/status"):
        try:
            fields = dict(line.split(":", 1) for line in status.read_text().splitlines() if ":" in line)
            if int(fields["Uid"].split()[0]) == uid:
                count += int(fields["Threads"])
        except (OSError, KeyError, ValueError):
            continue
    return count


def _rlimits(limits: PythonLimits, nproc: int) -> tuple[tuple[int, int], ...]:
    return ((resource.RLIMIT_CPU, int(limits.timeout_s) + 1), (resource.RLIMIT_AS, limits.memory_mb << 20),
            (resource.RLIMIT_FSIZE, limits.max_file_mb << 20), (resource.RLIMIT_CORE, 0),
            (resource.RLIMIT_NOFILE, limits.max_open_files), (resource.RLIMIT_NPROC, nproc))


def _apply_rlimits(rlimits: tuple[tuple[int, int], ...]) -> None:
    """Runs in the forked child before exec: C calls only (no imports, no locks)."""
    for which, value in rlimits:
        resource.setrlimit(which, (value, value))


def run_python(source: str, limits: PythonLimits = PythonLimits(), audit_guard: bool = True) -> RunResult:
    """Run ``source`` as ``__main__`` in the sandbox; ``audit_guard=False`` leaves out layer 3."""
    import secrets
    import signal
    import subprocess
    import tempfile

    isolate = namespaces_available()
    rlimits = _rlimits(limits, limits.max_processes + (0 if os.geteuid() == 0 else _user_tasks(os.getuid())))
    with tempfile.TemporaryDirectory(prefix=SANDBOX_TAG, ignore_cleanup_errors=True) as tmp:
        tmp = os.path.realpath(tmp)
        program = Path(tmp, "program.py")
        program.write_text(source, encoding="utf-8")
        out_path, err_path = Path(tmp, ".stdout"), Path(tmp, ".stderr")
        cmd = [*(_unshare_command() if isolate else []), sys.executable, "-I", "-B", os.path.abspath(__file__),
               tmp, str(program), "isolated" if isolate else "plain", "guard" if audit_guard else "noguard"]
        env = {"PATH": "/usr/bin:/bin", "HOME": tmp, "TMPDIR": tmp, "LANG": "C.UTF-8"}
        nonce = secrets.token_hex(16)
        with out_path.open("wb") as out, err_path.open("wb") as err:
            proc = subprocess.Popen(cmd, cwd=tmp, env=env, stdin=subprocess.PIPE, stdout=out, stderr=err,
                                    start_new_session=True, preexec_fn=lambda: _apply_rlimits(rlimits))
            try:
                proc.stdin.write(f"{nonce}\n".encode())
                proc.stdin.close()
            except BrokenPipeError:
                pass
            try:
                proc.wait(timeout=limits.timeout_s)
                timed_out = False
            except subprocess.TimeoutExpired:
                timed_out = True
            finally:
                try:
                    os.killpg(proc.pid, signal.SIGKILL)
                except ProcessLookupError:
                    pass
                proc.wait()
        stdout = out_path.read_text(encoding="utf-8", errors="replace")
        stderr = err_path.read_text(encoding="utf-8", errors="replace")
    passed = not timed_out and proc.returncode == 0 and stdout.rstrip().endswith(nonce)
    if passed:
        stdout = stdout.rstrip()[: -len(nonce) - 1]  # the nonce and the line break put before it
    return RunResult(passed=passed, returncode=proc.returncode, timed_out=timed_out, stdout=stdout, stderr=stderr)


# --- inside the sandbox -------------------------------------------------------------------------

def _lock_down(tmp: str) -> list[str]:
    """Make every mount read-only except ``tmp``, then drop all capabilities. Returns the mount
    points that could not be made read-only (reported on stderr)."""
    import ctypes

    libc = ctypes.CDLL(None, use_errno=True)
    libc.mount.argtypes = [ctypes.c_char_p, ctypes.c_char_p, ctypes.c_char_p, ctypes.c_ulong, ctypes.c_void_p]
    ms_rdonly, ms_remount, ms_bind, ms_rec, ms_private = 1, 32, 4096, 16384, 1 << 18
    kept = {"nosuid": 2, "nodev": 4, "noexec": 8, "noatime": 1024, "nodiratime": 2048, "relatime": 1 << 21}

    def mount(source, target, flags):
        if libc.mount(source, target.encode(), None, flags, None) != 0:
            raise OSError(ctypes.get_errno(), os.strerror(ctypes.get_errno()), target)

    mount(None, "/", ms_rec | ms_private)
    mount(tmp.encode(), tmp, ms_bind)
    failed = []
    for line in Path("/proc/self/mountinfo").read_text().splitlines():
        fields = line.split()
        target = re.sub(r"\\([0-7]{3})", lambda m: chr(int(m[1], 8)), fields[4])
        if target == tmp:
            continue
        flags = ms_remount | ms_bind | ms_rdonly | sum(kept.get(o, 0) for o in fields[5].split(","))
        try:
            mount(None, target, flags)
        except OSError:
            failed.append(target)
    pr_capbset_drop, pr_set_no_new_privs = 24, 38
    for cap in range(int(Path("/proc/sys/kernel/cap_last_cap").read_text()) + 1):
        libc.prctl(pr_capbset_drop, cap, 0, 0, 0)
    header = (ctypes.c_uint32 * 2)(0x20080522, 0)  # _LINUX_CAPABILITY_VERSION_3, this process
    if libc.capset(header, (ctypes.c_uint32 * 6)()) != 0:
        raise OSError(ctypes.get_errno(), "capset failed")
    libc.prctl(pr_set_no_new_privs, 1, 0, 0, 0)
    return failed


_GUARD_SOURCE = '''
def _guard(event, args, _tmp={tmp!r}, _getcwd=__import__("os").getcwd, _fspath=__import__("os").fspath,
           _isinstance=isinstance, _hasattr=hasattr, _all=all, _any=any, _str=str, _bytes=bytes, _int=int, _len=len,
           _error=PermissionError):
    # builtins and module functions are bound as defaults: the program cannot swap them afterwards
    def inside(path):
        if _isinstance(path, _int) or path is None:
            return True
        path = _fspath(path)
        if _isinstance(path, _bytes):
            path = path.decode("utf-8", "surrogateescape")
        if not path.startswith("/"):
            path = _getcwd() + "/" + path
        parts = []
        for part in path.split("/"):
            if part == "..":
                if parts:
                    parts.pop()
            elif part and part != ".":
                parts.append(part)
        path = "/" + "/".join(parts)
        return path == _tmp or path.startswith(_tmp + "/")

    if event == "open":
        path, mode, flags = args
        writing = ((mode is not None and _any(c in _str(mode) for c in "wax+"))
                   or (_isinstance(flags, _int) and flags & 0o3103))  # O_WRONLY|O_RDWR|O_CREAT|O_TRUNC|O_APPEND
        if writing and not inside(path):
            raise _error("sandbox: writing outside the temporary directory is not allowed")
    elif event in ("os.remove", "os.rmdir", "os.rename", "os.link", "os.symlink", "os.truncate", "os.chmod",
                   "os.chown", "os.mkdir", "os.utime", "os.chflags", "os.mkfifo", "os.mknod", "shutil.rmtree",
                   "shutil.copyfile", "shutil.copytree", "shutil.move"):
        if not _all(inside(a) for a in args if _isinstance(a, (_str, _bytes)) or _hasattr(a, "__fspath__")):
            raise _error("sandbox: " + event + " outside the temporary directory is not allowed")
    elif event == "import" and args[0] in ("ctypes", "_ctypes", "_posixsubprocess", "cffi"):
        raise _error("sandbox: import of " + args[0] + " is not allowed")
    elif event == "object.__setattr__" and _len(args) > 1 and args[1] in ("__code__", "__defaults__", "__kwdefaults__"):
        raise _error("sandbox: replacing function code is not allowed")
    elif event.startswith(("socket.", "subprocess.", "os.exec", "os.spawn", "os.posix_spawn", "os.fork", "os.system",
                           "os.kill", "pty.", "ctypes.", "resource.setrlimit", "resource.prlimit",
                           "signal.pthread_kill")):
        raise _error("sandbox: " + event + " is not allowed")
'''


def _entry(tmp: str, program: str, mode: str, guard: str) -> None:
    nonce = sys.stdin.readline().strip()
    sys.stdin = open(os.devnull)
    if mode == "isolated":
        failed = _lock_down(tmp)
        os.chdir(tmp)  # enter the writable bind mount (the old cwd is on the read-only one)
        if failed:
            print(f"sandbox: mounts left writable: {failed}", file=sys.stderr)
    for name in [m for m in sys.modules if m == "ctypes" or m.startswith(("ctypes.", "_ctypes"))]:
        del sys.modules[name]
    source = Path(program).read_text(encoding="utf-8")
    code = compile(source, program, "exec")
    if guard == "guard":
        scope: dict = {}
        exec(_GUARD_SOURCE.format(tmp=tmp), scope)
        sys.addaudithook(scope.pop("_guard"))
    exec(code, {"__name__": "__main__", "__file__": program, "__builtins__": __builtins__})
    sys.__stdout__.flush()
    os.write(1, f"\n{nonce}\n".encode())  # straight to fd 1, whatever the program did to sys.stdout


# --- SQL ----------------------------------------------------------------------------------------

class QueryError(Exception):
    """A generated query that failed, was denied, ran too long, or returned too much."""


def _authorize(action: int, arg1, arg2, db_name, trigger) -> int:
    import sqlite3

    if action in (sqlite3.SQLITE_SELECT, sqlite3.SQLITE_READ, sqlite3.SQLITE_RECURSIVE):
        return sqlite3.SQLITE_OK
    if action == sqlite3.SQLITE_FUNCTION and (arg2 or "").lower() != "load_extension":
        return sqlite3.SQLITE_OK
    return sqlite3.SQLITE_DENY


def readonly_query(db_path: str | Path, sql: str, timeout_s: float = 5.0, max_rows: int = 100_000,
                   max_value_bytes: int = 10_000_000) -> list[tuple]:
    """Rows of one read-only statement on ``db_path``; :class:`QueryError` on any failure."""
    import sqlite3
    import time

    path = Path(db_path).resolve()
    if not path.is_file():
        raise QueryError(f"database not found: {path}")
    try:
        con = sqlite3.connect(f"{path.as_uri()}?mode=ro", uri=True)
    except sqlite3.Error as e:
        raise QueryError(str(e)) from e
    try:
        con.execute("PRAGMA query_only = ON")
        con.setlimit(sqlite3.SQLITE_LIMIT_LENGTH, max_value_bytes)
        con.setlimit(sqlite3.SQLITE_LIMIT_ATTACHED, 0)
        con.set_authorizer(_authorize)
        deadline = time.monotonic() + timeout_s
        con.set_progress_handler(lambda: int(time.monotonic() > deadline), 1000)
        rows = con.execute(sql).fetchmany(max_rows + 1)
    except (sqlite3.Error, sqlite3.Warning, ValueError, OverflowError, MemoryError) as e:
        raise QueryError(f"{type(e).__name__}: {e}") from e
    finally:
        con.close()
    if len(rows) > max_rows:
        raise QueryError(f"more than {max_rows} rows")
    return rows


if __name__ == "__main__":
    _entry(*sys.argv[1:5])
