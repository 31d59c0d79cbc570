"""Running model-generated code safely: Python in a locked-down subprocess, SQL on a read-only
connection. Standard library only: this file is also the entry script of the sandbox's processes.

**Who decides "passed".** Generated code can do anything inside its own interpreter — walk the
stack, read the garbage collector, rewrite ``sys.stdout``, call ``os._exit(0)``, patch the test's
helpers — so no verdict may be produced there. :func:`check_candidate` therefore runs three
processes::

    harness ──stdin: job + nonce──▶ checker ──fd: call(args)──▶ sandboxed program
            ◀─stdout: verdict+nonce─         ◀─fd: plain-data result─

The *checker* (trusted, ``supervise`` below) runs the problem's test code (``check(candidate)``)
and the prompt's helper functions in its own interpreter; ``candidate`` there is a proxy that
sends each call's arguments to the sandboxed program and gets back a copy of the result as plain
data (None, bool, int, float, complex, str, bytes, list, tuple, dict, set, frozenset), decoded
from JSON. The verdict is "``check`` returned normally". It holds because the program never holds
anything that could produce it: it does not inherit the checker's stdin/stdout (the nonce and the
verdict travel there), cannot see the checker's memory (PID namespace; or, in the fallback,
``/proc/<other pid>`` denied and the checker made non-dumpable), never sees the test code (not on
disk, not in its memory), and all it can send back are values — it passes only by returning the
right values for the test's inputs. Objects with a rigged ``__eq__`` cannot cross (a subclass of
a plain type is sent as its base type and flagged), nor can a patched ``math.fabs``, ``poly`` or
``check``: those live in the checker. :func:`run_python` runs a whole program the same way; its
``passed`` ("ran to its end") is the program's own claim, fine for tests of the sandbox, never a
grade.

**Isolation.** Two modes, recorded in every result (``RunResult.isolation``):

- ``namespaces`` (where ``unshare`` works): new user/network/PID/IPC/mount namespaces — no network
  interface but a down loopback, every process dies with the program, every mount read-only but
  the program's temporary directory, then all capabilities dropped;
- ``fallback`` (unprivileged user namespaces are often disabled on clusters): where the kernel
  has them, a seccomp filter (no fork, sockets, ptrace, io_uring, mounts, signals to other
  processes, raising limits, ``TIOCSTI``) and Landlock (writes only beneath the temporary
  directory; reads nowhere under ``/proc`` but the program's own entry; nothing executable but
  the Python interpreter; no TCP; with ABI ≥ 6 no signals out of the sandbox), capabilities
  dropped — all applied before the program's interpreter starts, so it never loads ctypes.
  ``HARNESS_SANDBOX=fallback`` forces it.

In both modes: the program's own temporary directory (cwd, ``HOME``, ``TMPDIR``), a scrubbed
environment, ``-I -S`` (no site-packages), a new session, resource limits (CPU, address space,
file size, open files, processes), a wall-clock limit after which its processes are killed (the
checker is a child subreaper, so nothing forked escapes it), and an audit hook (PEP 578, cannot
be removed) that denies sockets, new processes, signals, ctypes/cffi, sub-interpreters, C
extensions from outside the standard library, sqlite3, crafted code objects and bytecode,
``/proc/<other pid>``, terminals, directories outside its folder (so no ``dir_fd`` escapes), and
writes, renames, links, deletions and mode changes outside its folder (``dir_fd`` resolved; no
symlinks at all); ``os.mknod``/``os.mkfifo``/pidfds, which raise no audit event, are removed (best
effort). The hook stops Python-level tricks; native code (a CPython memory-safety bug) gets past
it, and then the kernel layers above are what holds — weaker in the fallback, and weakest where
the kernel has neither seccomp nor Landlock (see :func:`isolation_layers`).

SQL (:func:`readonly_query`): sqlite URI ``mode=ro``, ``PRAGMA query_only``, an authorizer that
allows only reads (no ATTACH, CREATE, writes, PRAGMA, transactions), a value-size limit, a
row-count cap, and a time limit enforced by a progress handler.
"""
from __future__ import annotations

import json
import os
import sys

SANDBOX_TAG = "harness-sandbox-"
ISOLATIONS = ("fallback", "namespaces")  # weakest first
FORCE_ENV = "HARNESS_SANDBOX"  # "fallback" forces the fallback; "auto" (or unset): namespaces where possible
_MAX_REPLY_BYTES = 8 << 20  # one result from the program, JSON-encoded
_MAX_OUTPUT_BYTES = 1 << 20  # the program's stdout and stderr kept, each
_SETUP_FAILED = 3  # the program's exit code when a sandbox layer could not be applied


# --- harness side ---------------------------------------------------------------------------------

class PythonLimits:
    """Per-run limits (a plain class: this file must import without ``dataclasses`` in the sandbox)."""

    __slots__ = ("timeout_s", "memory_mb", "max_processes", "max_file_mb", "max_open_files")

    def __init__(self, timeout_s: float = 10.0, memory_mb: int = 1024, max_processes: int = 16,
                 max_file_mb: int = 16, max_open_files: int = 128):
        self.timeout_s = timeout_s
        self.memory_mb = memory_mb
        self.max_processes = max_processes  # beyond the user's current tasks; uid 0 is exempt (kernel rule)
        self.max_file_mb = max_file_mb
        self.max_open_files = max_open_files

    def __repr__(self):
        return "PythonLimits(" + ", ".join(f"{k}={getattr(self, k)!r}" for k in self.__slots__) + ")"


class RunResult:
    """What a sandboxed run produced. ``passed``: for :func:`check_candidate` the checker's verdict;
    for :func:`run_python` that the program ran to its end (its own claim). ``flags`` name results
    that were not plain data (``sent as int``: a subclass converted; ``not plain data``)."""

    __slots__ = ("passed", "returncode", "timed_out", "stdout", "stderr", "isolation", "layers", "reason", "flags")

    def __init__(self, passed: bool, returncode: int | None, timed_out: bool, stdout: str, stderr: str,
                 isolation: str = "", layers: tuple[str, ...] = (), reason: str = "", flags: tuple[str, ...] = ()):
        self.passed, self.returncode, self.timed_out = passed, returncode, timed_out
        self.stdout, self.stderr = stdout, stderr
        self.isolation, self.layers, self.reason, self.flags = isolation, tuple(layers), reason, tuple(flags)

    def __repr__(self):
        return "RunResult(" + ", ".join(f"{k}={getattr(self, k)!r}" for k in self.__slots__ if k not in ("stdout", "stderr")) + ")"


def _unshare_command() -> list[str]:
    cmd = ["unshare", "--mount", "--net", "--pid", "--ipc", "--fork", "--kill-child", "--mount-proc"]
    return cmd if os.geteuid() == 0 else [cmd[0], "--user", "--map-root-user", *cmd[1:]]


_PROBES: dict[str, object] = {}


def namespaces_available() -> bool:
    """Whether ``unshare`` can isolate a program here (probed once per process)."""
    if "namespaces" not in _PROBES:
        import subprocess

        try:
            probe = subprocess.run([*_unshare_command(), sys.executable, "-I", "-S", "-c", "pass"],
                                   stdin=subprocess.DEVNULL, capture_output=True, timeout=30)
            _PROBES["namespaces"] = probe.returncode == 0
        except (OSError, subprocess.TimeoutExpired):
            _PROBES["namespaces"] = False
    return bool(_PROBES["namespaces"])


def _landlock_abi() -> int:
    """The kernel's Landlock ABI version, 0 where it has none (probed once per process)."""
    if "landlock" not in _PROBES:
        import ctypes

        libc = ctypes.CDLL(None, use_errno=True)
        libc.syscall.restype = ctypes.c_long
        _PROBES["landlock"] = max(0, int(libc.syscall(_NR_LANDLOCK_CREATE_RULESET, None, 0, _LANDLOCK_VERSION)))
    return int(_PROBES["landlock"])


def _seccomp_available() -> bool:
    """Whether libseccomp can be loaded (probed once per process); the kernel side is near-universal."""
    if "seccomp" not in _PROBES:
        try:
            _libseccomp()
            _PROBES["seccomp"] = True
        except OSError:
            _PROBES["seccomp"] = False
    return bool(_PROBES["seccomp"])


def isolation_in_force() -> str:
    """``namespaces`` where ``unshare`` works, else ``fallback``; ``HARNESS_SANDBOX=fallback`` forces
    the fallback (to test it, or where ``unshare`` half-works)."""
    forced = os.environ.get(FORCE_ENV, "auto") or "auto"
    if forced not in ("auto", "fallback"):
        from harness.errors import ConfigError

        raise ConfigError(f"environment variable {FORCE_ENV}={forced!r}. Valid: auto, fallback")
    return "fallback" if forced == "fallback" or not namespaces_available() else "namespaces"


def isolation_layers(isolation: str, audit_guard: bool = True) -> tuple[str, ...]:
    """The layers a run in ``isolation`` gets on this machine (all apply, or the run fails)."""
    common = ("own temp dir", "scrubbed env", "rlimits", "new session") + (("audit hook",) if audit_guard else ())
    if isolation == "namespaces":
        return ("namespaces", "read-only mounts", "no capabilities") + common
    abi = _landlock_abi()
    return ((("seccomp",) if _seccomp_available() else ()) + ((f"landlock v{abi}",) if abi else ())
            + ("no capabilities",) + common)


def require_isolation(minimum: str, setting: str = "dataset.min_isolation") -> str:
    """The isolation in force, or a :class:`~harness.errors.ConfigError` naming ``setting`` when it is
    weaker than ``minimum`` (the user lowers the minimum to opt in to weaker isolation)."""
    from harness.errors import ConfigError

    if minimum not in ISOLATIONS:
        raise ConfigError(f"{setting}={minimum!r}. Valid: {', '.join(reversed(ISOLATIONS))}")
    isolation = isolation_in_force()
    if ISOLATIONS.index(isolation) < ISOLATIONS.index(minimum):
        why = (f"{FORCE_ENV}=fallback is set" if os.environ.get(FORCE_ENV) == "fallback"
               else "unshare cannot create user namespaces on this machine")
        raise ConfigError(
            f"{setting}={minimum!r} but only '{isolation}' isolation is available ({why}). The fallback "
            f"({', '.join(isolation_layers(isolation))}) is weaker than namespaces: generated code could, "
            f"for example, read files your user can read. To run generated code anyway, set {setting}={isolation}.")
    return isolation


def _user_tasks(uid: int) -> int:
    """Processes and threads of ``uid`` now (what ``RLIMIT_NPROC`` counts)."""
    from pathlib import Path

    count = 0
    for status in Path("/proc").glob("[0-9]*/status"):
        try:
            fields = dict(line.split(":", 1) for line in status.read_text().splitlines() if ":" in line)
            if int(fields["Uid"].split()[0]) == uid:
                count += int(fields["Threads"])
        except (OSError, KeyError, ValueError):
            continue
    return count


def _rlimits(limits: PythonLimits) -> list[tuple[int, int]]:
    import resource

    nproc = limits.max_processes + (0 if os.geteuid() == 0 else _user_tasks(os.getuid()))
    return [(resource.RLIMIT_CPU, int(limits.timeout_s) + 1), (resource.RLIMIT_AS, limits.memory_mb << 20),
            (resource.RLIMIT_FSIZE, limits.max_file_mb << 20), (resource.RLIMIT_CORE, 0),
            (resource.RLIMIT_NOFILE, limits.max_open_files), (resource.RLIMIT_NPROC, nproc)]


def _extension_dirs() -> list[str]:
    """Folders of the standard library's C extensions (real paths): the only ones the program may load."""
    if "dynload" not in _PROBES:
        import sysconfig

        import _json  # a C extension of the standard library, where this build has it as one

        paths = sysconfig.get_paths()
        dirs = {os.path.realpath(os.path.join(paths[k], "lib-dynload")) for k in ("stdlib", "platstdlib")}
        if getattr(_json, "__file__", None):
            dirs.add(os.path.dirname(os.path.realpath(_json.__file__)))
        _PROBES["dynload"] = sorted(dirs)
    return list(_PROBES["dynload"])


def run_python(source: str, limits: PythonLimits = PythonLimits(), audit_guard: bool = True,
               isolation: str | None = None) -> RunResult:
    """Run ``source`` as ``__main__`` in the sandbox. ``isolation``: ``None`` = :func:`isolation_in_force`,
    ``"fallback"`` forces the fallback, ``"namespaces"`` requires it; ``audit_guard=False`` leaves out
    the audit hook (to test the OS layers alone)."""
    return _supervised(source, limits, audit_guard, isolation, None)


def check_candidate(program: str, entry_point: str, test: str, test_context: str = "",
                    limits: PythonLimits = PythonLimits(), audit_guard: bool = True,
                    isolation: str | None = None) -> RunResult:
    """Run ``program`` in the sandbox and ``test_context`` + ``test`` + ``check(candidate)`` in the
    checker, where ``candidate`` (and the name ``entry_point``) calls ``program``'s ``entry_point``
    with copies of its arguments and returns a plain-data copy of its result. ``passed`` is the
    checker's verdict: ``check`` returned normally. See the module docstring for why the program
    cannot forge it."""
    return _supervised(program, limits, audit_guard, isolation,
                       {"entry_point": entry_point, "test": test, "test_context": test_context})


def _supervised(source: str, limits: PythonLimits, audit_guard: bool, isolation: str | None,
                check: dict | None) -> RunResult:
    import secrets
    import subprocess
    import tempfile

    if isolation is None:
        isolation = isolation_in_force()
    elif isolation not in ISOLATIONS:
        raise ValueError(f"isolation={isolation!r}. Valid: {', '.join(ISOLATIONS)}")
    elif isolation == "namespaces" and not namespaces_available():
        from harness.errors import ConfigError

        raise ConfigError("isolation 'namespaces' requested but unshare cannot create namespaces here")
    layers = isolation_layers(isolation, audit_guard)
    nonce = secrets.token_hex(16)
    with tempfile.TemporaryDirectory(prefix=SANDBOX_TAG, ignore_cleanup_errors=True) as tmp:
        tmp = os.path.realpath(tmp)
        program = os.path.join(tmp, "program.py")
        with open(program, "w", encoding="utf-8") as f:
            f.write(source)
        job = {"nonce": nonce, "tmp": tmp, "program": program, "isolation": isolation, "layers": layers,
               "guard": audit_guard, "timeout_s": limits.timeout_s, "rlimits": _rlimits(limits),
               "unshare": _unshare_command(), "dynload": _extension_dirs(), "check": check}
        try:
            proc = subprocess.run([sys.executable, "-I", "-S", "-B", os.path.abspath(__file__), "supervise"],
                                  input=json.dumps(job).encode(), capture_output=True, cwd=tmp,
                                  env={"PATH": "/usr/bin:/bin", "LANG": "C.UTF-8"}, start_new_session=True,
                                  timeout=limits.timeout_s + 30)  # the checker keeps time; this is its own limit
        except subprocess.TimeoutExpired:  # killed; its program dies with it (parent-death signal)
            return RunResult(False, None, True, "", "", isolation, layers, "the checker did not answer in time")
    verdict = None
    for line in proc.stdout.decode("utf-8", "replace").splitlines()[::-1]:
        try:
            candidate = json.loads(line)
        except ValueError:
            continue
        if isinstance(candidate, dict) and candidate.get("nonce") == nonce:
            verdict = candidate
            break
    if verdict is None:
        tail = proc.stderr.decode("utf-8", "replace")[-2000:]
        return RunResult(False, None, False, "", tail, isolation, layers,
                         f"no verdict from the checker (exit code {proc.returncode})")
    return RunResult(bool(verdict["passed"]), verdict["returncode"], bool(verdict["timed_out"]), verdict["stdout"],
                     verdict["stderr"], isolation, layers, verdict["reason"], verdict["flags"])


# --- the wire between the checker and the program: plain data as JSON ----------------------------

_BASES = (bool, int, float, complex, str, bytes, list, tuple, dict, set, frozenset)


def _as_base(value, base):
    """A subclass instance as its plain base type (through the base type's own methods)."""
    if base is int:
        return int.__index__(value)
    if base is float:
        return float.__float__(value)
    if base is complex:
        return complex(float.__float__(complex.real.__get__(value)), float.__float__(complex.imag.__get__(value)))
    if base is str:
        return str.__str__(value)
    if base is bytes:
        return b"".join([value])
    if base is dict:
        return dict(dict.items(value))
    return base(base.__iter__(value))


def _to_wire(value, notes: set, depth: int = 0):
    """``value`` as JSON-ready data; tuples, sets, dicts, bytes, complex and big ints are tagged."""
    if depth > 200:
        raise ValueError("nested too deeply")
    t = type(value)
    if value is None or t is bool or t is float or t is str:
        return value
    if t is int:
        return value if -(1 << 63) <= value < (1 << 63) else {"int": hex(value)}
    if t is list:
        return [_to_wire(v, notes, depth + 1) for v in value]
    if t in (tuple, set, frozenset):
        return {t.__name__: [_to_wire(v, notes, depth + 1) for v in value]}
    if t is dict:
        return {"dict": [[_to_wire(k, notes, depth + 1), _to_wire(v, notes, depth + 1)] for k, v in value.items()]}
    if t is bytes:
        return {"bytes": value.hex()}
    if t is complex:
        return {"complex": [value.real, value.imag]}
    for base in _BASES:
        if isinstance(value, base) and base is not bool:
            notes.add(f"{t.__module__}.{t.__qualname__} sent as {base.__name__}")
            return _to_wire(_as_base(value, base), notes, depth)
    raise TypeError(f"{t.__module__}.{t.__qualname__} is not plain data")


def _from_wire(data):
    """Inverse of :func:`_to_wire` on untrusted JSON: only plain data comes out, or ``ValueError``."""
    if data is None or type(data) in (bool, int, float, str):
        return data
    if type(data) is list:
        return [_from_wire(v) for v in data]
    if type(data) is not dict or len(data) != 1:
        raise ValueError("malformed value")
    [(tag, body)] = data.items()
    if tag == "int" and type(body) is str:
        return int(body, 16)
    if tag == "bytes" and type(body) is str:
        return bytes.fromhex(body)
    if tag == "complex" and type(body) is list and len(body) == 2 and all(type(x) in (int, float) for x in body):
        return complex(*body)
    if type(body) is not list:
        raise ValueError("malformed value")
    if tag in ("tuple", "set", "frozenset"):
        return {"tuple": tuple, "set": set, "frozenset": frozenset}[tag](_from_wire(v) for v in body)
    if tag == "dict" and all(type(kv) is list and len(kv) == 2 for kv in body):
        return {_from_wire(k): _from_wire(v) for k, v in body}
    raise ValueError(f"malformed value (tag {tag!r})")


def _dumps(obj) -> bytes:
    return (json.dumps(obj, separators=(",", ":")) + "\n").encode()


# --- the checker (trusted): spawns the program, runs the test, decides the verdict --------------

class _Deadline(BaseException):
    """The run's wall-clock limit passed (a BaseException: test code cannot swallow it)."""


class CandidateError(Exception):
    """A call into the sandboxed program failed: it died, answered garbage, or returned something
    that is not plain data."""


class _Program:
    """The sandboxed program, seen from the checker: started, called, killed."""

    def __init__(self, job: dict, deadline: float):
        import resource
        import subprocess

        self.deadline = deadline
        req_r, self.req_w = os.pipe()
        self.resp_r, resp_w = os.pipe()
        tmp = job["tmp"]
        self.out, self.err = _anonymous_file(os.path.dirname(tmp)), _anonymous_file(os.path.dirname(tmp))
        cmd = [*(job["unshare"] if job["isolation"] == "namespaces" else []), sys.executable, "-I", "-S", "-B",
               os.path.abspath(__file__), "program", json.dumps({
                   "tmp": tmp, "program": job["program"], "isolation": job["isolation"], "layers": job["layers"],
                   "guard": job["guard"], "dynload": job["dynload"],
                   "entry_point": (job["check"] or {}).get("entry_point"), "requests": req_r, "replies": resp_w})]
        env = {"PATH": "/usr/bin:/bin", "HOME": tmp, "TMPDIR": tmp, "LANG": "C.UTF-8"}
        rlimits = [tuple(r) for r in job["rlimits"]]
        fallback = {"tmp": tmp, "layers": job["layers"]} if job["isolation"] == "fallback" else None
        self.proc = subprocess.Popen(cmd, cwd=tmp, env=env, stdin=subprocess.DEVNULL, stdout=self.out,
                                     stderr=self.err, pass_fds=(req_r, resp_w), start_new_session=True,
                                     preexec_fn=lambda: _child_setup(rlimits, resource.setrlimit, fallback))
        os.close(req_r)
        os.close(resp_w)
        self.buffer = bytearray()
        self.notes: set[str] = set()

    def receive(self):
        """The program's next message (a JSON list), or ``None`` at end of file."""
        import select

        while b"\n" not in self.buffer:
            remaining = self.deadline - _monotonic()
            if remaining <= 0:
                raise _Deadline()
            if not select.select([self.resp_r], [], [], remaining)[0]:
                raise _Deadline()
            chunk = os.read(self.resp_r, 1 << 16)
            if not chunk:
                return None
            self.buffer += chunk
            if len(self.buffer) > _MAX_REPLY_BYTES and b"\n" not in self.buffer:
                raise CandidateError(f"a reply larger than {_MAX_REPLY_BYTES} bytes")
        line, _, rest = bytes(self.buffer).partition(b"\n")
        self.buffer = bytearray(rest)
        try:
            message = json.loads(line)
        except (ValueError, RecursionError) as e:
            raise CandidateError(f"unreadable reply: {e}") from None
        if type(message) is not list or not message or type(message[0]) is not str:
            raise CandidateError("malformed reply")
        return message

    def call(self, args: tuple, kwargs: dict):
        try:
            request = _dumps(_to_wire((args, kwargs), set()))
        except (TypeError, ValueError) as e:
            raise CandidateError(f"the test passed an argument that cannot be sent: {e}") from None
        try:
            _write_all(self.req_w, request, self.deadline)
        except BrokenPipeError:
            raise CandidateError(self._ended()) from None
        message = self.receive()
        if message is None:
            raise CandidateError(self._ended())
        kind = message[0]
        if kind == "ok" and len(message) == 3 and type(message[2]) is list:
            self.notes.update(str(n)[:200] for n in message[2][:20])
            try:
                return _from_wire(message[1])
            except (ValueError, TypeError, RecursionError) as e:
                raise CandidateError(f"malformed result: {e}") from None
        if kind == "raised" and len(message) == 3:
            raise _exception(str(message[1]), str(message[2]))
        if kind == "unsupported" and len(message) == 2:
            note = f"{str(message[1])[:200]} (not plain data)"
            self.notes.add(note)
            raise CandidateError(f"the program returned {note}")
        raise CandidateError("malformed reply")

    def _ended(self) -> str:
        try:
            code = self.proc.wait(timeout=1)
        except Exception:  # noqa: BLE001 — still running: it closed its pipes
            code = None
        return f"the program ended during a call (exit code {code})"

    def stop(self) -> tuple[int | None, str, str]:
        """Kill the program and everything it started; (exit code, stdout, stderr)."""
        import signal
        import subprocess

        for fd in (self.req_w, self.resp_r):
            try:
                os.close(fd)
            except OSError:
                pass
        try:
            self.proc.wait(timeout=0.5)  # at end of file, a checked program leaves on its own
        except subprocess.TimeoutExpired:
            pass
        try:
            os.killpg(self.proc.pid, signal.SIGKILL)
        except (ProcessLookupError, PermissionError):
            pass
        self.proc.wait()
        _reap_descendants()
        outputs = []
        for f in (self.out, self.err):
            f.seek(0)
            outputs.append(f.read(_MAX_OUTPUT_BYTES).decode("utf-8", "replace"))
            f.close()
        return self.proc.returncode, outputs[0], outputs[1]


def _anonymous_file(folder: str):
    """A file with no name (unreachable by path), for the program's stdout or stderr."""
    try:
        return os.fdopen(os.open(folder, os.O_TMPFILE | os.O_RDWR | os.O_CLOEXEC, 0o600), "w+b")
    except (AttributeError, OSError):  # no O_TMPFILE here
        import tempfile

        return tempfile.TemporaryFile(dir=folder)


def _monotonic() -> float:
    import time

    return time.monotonic()


def _write_all(fd: int, data: bytes, deadline: float) -> None:
    import select

    view = memoryview(data)
    while view:
        remaining = deadline - _monotonic()
        if remaining <= 0 or not select.select([], [fd], [], remaining)[1]:
            raise _Deadline()
        view = view[os.write(fd, view[: 1 << 16]):]


def _exception(name: str, message: str) -> Exception:
    """The checker-side exception for one the program raised: the builtin class of that name where
    it is an ``Exception`` (so a test could catch it), else :class:`CandidateError`."""
    import builtins

    cls = getattr(builtins, name, None)
    if isinstance(cls, type) and issubclass(cls, Exception):
        try:
            return cls(message[:1000])
        except Exception:  # noqa: BLE001 — a constructor with other arguments (UnicodeError, ...)
            pass
    return CandidateError(f"{name[:100]}: {message[:1000]}")


def _child_setup(rlimits, setrlimit, fallback: dict | None) -> None:
    """Runs in the checker's fork before it execs the program's interpreter: limits, death with the
    checker, and in the fallback the kernel layers (they persist across exec; doing them here keeps
    ctypes out of the program's interpreter). Fails closed: exit code ``_SETUP_FAILED``."""
    try:
        for which, value in rlimits:
            setrlimit(which, (value, value))
        _prctl(1, 9)  # PR_SET_PDEATHSIG, SIGKILL: a killed checker takes its program with it
        if fallback is not None:
            libc = _libc()
            _drop_capabilities(libc)
            for layer in fallback["layers"]:
                if layer.startswith("landlock v"):
                    _landlock(libc, fallback["tmp"], int(layer[len("landlock v"):]))
                elif layer == "seccomp":
                    _seccomp()
    except BaseException as e:  # noqa: BLE001
        os.write(2, f"sandbox setup failed: {type(e).__name__}: {e}\n".encode())
        os._exit(_SETUP_FAILED)


def _prctl(option: int, arg: int) -> int:
    import ctypes

    return ctypes.CDLL(None, use_errno=True).prctl(option, arg, 0, 0, 0)


def _reap_descendants() -> None:
    """Kill and reap every remaining descendant: orphans re-parent to the checker (a subreaper)."""
    import signal

    while True:
        children = []
        for entry in os.listdir("/proc"):
            try:
                with open(f"/proc/{entry}/stat", "rb") as f:
                    if int(f.read().rsplit(b")", 1)[1].split()[1]) == os.getpid():
                        children.append(int(entry))
            except (OSError, IndexError, ValueError):
                continue
        if not children:
            return
        for pid in children:  # each SIGKILLed and waited for; their own orphans come next round
            try:
                os.kill(pid, signal.SIGKILL)
                os.waitpid(pid, 0)
            except (ProcessLookupError, ChildProcessError):
                pass


def _supervise() -> None:
    """The checker's main: job on stdin, verdict (with the nonce) as the last line of stdout."""
    import signal

    job = json.loads(sys.stdin.buffer.read())
    verdict_fd = os.dup(1)
    os.dup2(2, 1)  # the test's own prints go to stderr, never into the verdict channel
    _prctl(4, 0)  # PR_SET_DUMPABLE 0: /proc/<checker>/{mem,environ,fd} closed to same-uid processes
    _prctl(36, 1)  # PR_SET_CHILD_SUBREAPER: orphans of the program re-parent here, and are killed
    deadline = _monotonic() + float(job["timeout_s"])

    def alarm(signum, frame):
        raise _Deadline()

    signal.signal(signal.SIGALRM, alarm)
    signal.setitimer(signal.ITIMER_REAL, float(job["timeout_s"]) + 0.05)
    check = job["check"]
    passed, timed_out, reason, program = False, False, "", None
    try:
        try:
            program = _Program(job, deadline)
            first = program.receive()
            if check is None:
                passed = first == ["done"] and _exit_code(program.proc, deadline) == 0
                reason = "ran to its end" if passed else _not_ready(first, program)
            elif first != ["ready"]:
                reason = _not_ready(first, program)
            else:
                scope: dict = {"__name__": "__check__"}
                exec(compile(check["test_context"], "<prompt>", "exec"), scope)
                exec(compile(check["test"], "<test>", "exec"), scope)

                def candidate(*args, **kwargs):
                    return program.call(args, kwargs)

                candidate.__name__ = candidate.__qualname__ = str(check["entry_point"])
                scope[check["entry_point"]] = candidate
                scope["check"](candidate)
                passed, reason = True, "the test passed"
        finally:
            signal.setitimer(signal.ITIMER_REAL, 0)
    except _Deadline:
        passed, timed_out, reason = False, True, f"timed out after {job['timeout_s']} s"
    except Exception as e:  # noqa: BLE001 — any failure of the test is a failed check
        import traceback

        where = [f"{fr.filename}:{fr.lineno}" for fr in traceback.extract_tb(e.__traceback__)
                 if fr.filename in ("<test>", "<prompt>")]
        passed, reason = False, f"{type(e).__name__}: {str(e)[:500]}" + (f" at {where[-1]}" if where else "")
    returncode, stdout, stderr = program.stop() if program else (None, "", "")
    if returncode == _SETUP_FAILED and not passed:
        reason = stderr.strip()[-500:] or "sandbox setup failed"
    verdict = {"nonce": job["nonce"], "passed": passed, "timed_out": timed_out, "reason": reason,
               "returncode": returncode, "stdout": stdout, "stderr": stderr,
               "flags": sorted(program.notes) if program else []}
    os.write(verdict_fd, b"\n" + _dumps(verdict))


def _exit_code(proc, deadline: float) -> int:
    import subprocess

    try:
        return proc.wait(max(0.0, deadline - _monotonic()))
    except subprocess.TimeoutExpired:
        raise _Deadline() from None


def _not_ready(first, program: _Program) -> str:
    if first is None:
        return f"the program ended before it was ready (exit code {program.proc.wait()})"
    if first[0] == "error" and len(first) == 2:
        return f"the program raised {str(first[1])[:500]}"
    return "the program sent an unexpected first message"


# --- inside the sandbox ---------------------------------------------------------------------------

_NR_LANDLOCK_CREATE_RULESET, _NR_LANDLOCK_ADD_RULE, _NR_LANDLOCK_RESTRICT_SELF = 444, 445, 446  # every arch
_LANDLOCK_VERSION = 1  # LANDLOCK_CREATE_RULESET_VERSION


def _libc():
    import ctypes

    libc = ctypes.CDLL(None, use_errno=True)
    libc.syscall.restype = ctypes.c_long
    return libc


def _check(rc: int, what: str) -> int:
    import ctypes

    if rc < 0:
        err = ctypes.get_errno()
        raise OSError(err, f"{what}: {os.strerror(err)}")
    return rc


def _drop_capabilities(libc) -> None:
    """Empty the bounding, permitted, effective and inheritable sets, and set no_new_privs."""
    import ctypes

    pr_capbset_drop, pr_set_no_new_privs = 24, 38
    with open("/proc/sys/kernel/cap_last_cap") as f:
        last = int(f.read())
    for cap in range(last + 1):
        libc.prctl(pr_capbset_drop, cap, 0, 0, 0)  # EPERM without CAP_SETPCAP: nothing to drop then
    header = (ctypes.c_uint32 * 2)(0x20080522, 0)  # _LINUX_CAPABILITY_VERSION_3, this process
    _check(libc.capset(header, (ctypes.c_uint32 * 6)()), "capset")
    _check(libc.prctl(pr_set_no_new_privs, 1, 0, 0, 0), "no_new_privs")


def _lock_down(tmp: str) -> list[str]:
    """Namespaces mode: make every mount read-only except ``tmp``, then drop all capabilities.
    Returns the mount points that could not be made read-only (reported on stderr)."""
    import ctypes
    import re

    libc = _libc()
    libc.mount.argtypes = [ctypes.c_char_p, ctypes.c_char_p, ctypes.c_char_p, ctypes.c_ulong, ctypes.c_void_p]
    ms_rdonly, ms_remount, ms_bind, ms_rec, ms_private = 1, 32, 4096, 16384, 1 << 18
    kept = {"nosuid": 2, "nodev": 4, "noexec": 8, "noatime": 1024, "nodiratime": 2048, "relatime": 1 << 21}

    def mount(source, target, flags):
        if libc.mount(source, target.encode(), None, flags, None) != 0:
            raise OSError(ctypes.get_errno(), os.strerror(ctypes.get_errno()), target)

    mount(None, "/", ms_rec | ms_private)
    mount(tmp.encode(), tmp, ms_bind)
    failed = []
    with open("/proc/self/mountinfo") as f:
        mountinfo = f.read().splitlines()
    for line in mountinfo:
        fields = line.split()
        target = re.sub(r"\\([0-7]{3})", lambda m: chr(int(m[1], 8)), fields[4])
        if target == tmp:
            continue
        flags = ms_remount | ms_bind | ms_rdonly | sum(kept.get(o, 0) for o in fields[5].split(","))
        try:
            mount(None, target, flags)
        except OSError:
            failed.append(target)
    _drop_capabilities(libc)
    return failed


def _elf_interpreter(executable: str) -> str | None:
    """The dynamic loader an ELF executable names (PT_INTERP), or None (static, or not ELF)."""
    import struct

    with open(executable, "rb") as f:
        head = f.read(64)
        if head[:4] != b"\x7fELF":
            return None
        wide, order = head[4] == 2, "<" if head[5] == 1 else ">"  # ELF64?, byte order
        phoff = struct.unpack_from(order + ("Q" if wide else "I"), head, 0x20 if wide else 0x1C)[0]
        phentsize, phnum = struct.unpack_from(order + "HH", head, 0x36 if wide else 0x2A)
        for i in range(phnum):
            f.seek(phoff + i * phentsize)
            entry = f.read(phentsize)
            p_type = struct.unpack_from(order + "I", entry, 0)[0]
            if p_type == 3:  # PT_INTERP
                offset, size = (struct.unpack_from(order + "Q16xQ", entry, 8) if wide else  # p_offset, p_filesz
                                struct.unpack_from(order + "I8xI", entry, 4))
                f.seek(offset)
                return f.read(size).rstrip(b"\0").decode()
    return None


def _landlock(libc, tmp: str, abi: int) -> None:
    """Fallback mode: writes only beneath ``tmp`` (and to /dev/null); reads anywhere but ``/proc``,
    where only this process's own entry stays readable; nothing executable but the Python
    interpreter and its loader (to start the program's interpreter); no TCP (ABI ≥ 4); no signals
    or abstract unix sockets out of the sandbox (ABI ≥ 6)."""
    import ctypes
    import stat

    execute, write_file, read_file, read_dir = 1, 2, 4, 8
    writes = sum(1 << b for b in range(4, 13)) | write_file  # remove/make dir, file, char, block, fifo, sock, symlink
    if abi >= 2:
        writes |= 1 << 13  # REFER
    if abi >= 3:
        writes |= 1 << 14  # TRUNCATE
    if abi >= 5:
        writes |= 1 << 15  # IOCTL_DEV
    handled = writes | read_file | read_dir | execute

    class RulesetAttr(ctypes.Structure):
        _fields_ = [("fs", ctypes.c_uint64), ("net", ctypes.c_uint64), ("scoped", ctypes.c_uint64)]

    class PathBeneath(ctypes.Structure):
        _pack_ = 1
        _fields_ = [("allowed", ctypes.c_uint64), ("parent_fd", ctypes.c_int32)]

    attr = RulesetAttr(handled, 3 if abi >= 4 else 0, 3 if abi >= 6 else 0)  # net: bind+connect TCP; scope: both
    ruleset = _check(libc.syscall(_NR_LANDLOCK_CREATE_RULESET, ctypes.byref(attr), ctypes.sizeof(attr), 0),
                     "landlock_create_ruleset")
    try:
        def allow(path: str, access: int) -> None:
            fd = os.open(path, os.O_PATH | os.O_CLOEXEC)
            try:
                if not stat.S_ISDIR(os.fstat(fd).st_mode):
                    access &= execute | write_file | read_file | (1 << 14) | (1 << 15)  # file-compatible rights
                rule = PathBeneath(access & handled, fd)
                _check(libc.syscall(_NR_LANDLOCK_ADD_RULE, ruleset, 1, ctypes.byref(rule), 0), f"landlock rule {path}")
            finally:
                os.close(fd)

        for entry in os.listdir("/"):
            if entry != "proc":
                try:
                    allow("/" + entry, read_file | read_dir)
                except FileNotFoundError:  # a dangling top-level link
                    continue
        allow("/proc/self", read_file | read_dir)  # this process's own entry only
        executable = os.path.realpath(sys.executable)
        for program in (executable, _elf_interpreter(executable)):
            if program:
                allow(os.path.realpath(program), execute | read_file)
        allow(tmp, handled)
        allow("/dev/null", read_file | write_file | (1 << 14))
        _check(libc.syscall(_NR_LANDLOCK_RESTRICT_SELF, ruleset, 0), "landlock_restrict_self")
    finally:
        os.close(ruleset)


def _libseccomp():
    import ctypes

    try:
        return ctypes.CDLL("libseccomp.so.2", use_errno=True)
    except OSError:
        import ctypes.util  # starts processes (ldconfig): only where the usual name is missing

        return ctypes.CDLL(ctypes.util.find_library("seccomp") or "libseccomp.so.2", use_errno=True)


def _seccomp() -> None:
    """Fallback mode: a seccomp filter (libseccomp resolves the numbers for this architecture;
    other architectures' calls kill the process) that fails with EPERM: new processes (fork,
    vfork, clone without CLONE_THREAD; clone3 answers ENOSYS so threads fall back to clone) —
    exec stays, the filter being installed before the program's interpreter is exec'd, so an exec
    only replaces the process under the same filter and Landlock —, mknod (device nodes, FIFOs and
    files: no audit event covers it), sockets (socketpair stays), ptrace and cross-process memory,
    pidfds, signals to other processes, io_uring,
    mounts and namespaces, raising resource limits, kernel keys/modules/BPF, file handles, and the
    TIOCSTI/TIOCLINUX ioctls (typing into a terminal)."""
    import ctypes

    lib = _libseccomp()

    class Cmp(ctypes.Structure):
        _fields_ = [("arg", ctypes.c_uint), ("op", ctypes.c_int), ("a", ctypes.c_uint64), ("b", ctypes.c_uint64)]

    lib.seccomp_init.restype = ctypes.c_void_p
    lib.seccomp_init.argtypes = [ctypes.c_uint32]
    lib.seccomp_syscall_resolve_name.argtypes = [ctypes.c_char_p]
    lib.seccomp_rule_add_array.argtypes = [ctypes.c_void_p, ctypes.c_uint32, ctypes.c_int, ctypes.c_uint,
                                           ctypes.POINTER(Cmp)]
    lib.seccomp_attr_set.argtypes = [ctypes.c_void_p, ctypes.c_int, ctypes.c_uint32]
    lib.seccomp_load.argtypes = lib.seccomp_release.argtypes = [ctypes.c_void_p]
    allow, kill_process = 0x7FFF0000, 0x80000000
    eperm, enosys = 0x00050000 | 1, 0x00050000 | 38
    ne, eq, masked_eq = 1, 4, 7
    pid, clone_thread = os.getpid(), 0x00010000
    ctx = lib.seccomp_init(allow)
    if not ctx:
        raise OSError("seccomp_init failed")
    try:
        if lib.seccomp_attr_set(ctx, 2, kill_process) < 0:  # SCMP_FLTATR_ACT_BADARCH
            raise OSError("seccomp: cannot set the action for other architectures")

        def rule(action, name, *cmps):
            nr = lib.seccomp_syscall_resolve_name(name.encode())
            if nr < 0:  # not a system call on this architecture
                return
            rc = lib.seccomp_rule_add_array(ctx, action, nr, len(cmps), (Cmp * len(cmps))(*cmps) if cmps else None)
            if rc < 0:  # libseccomp returns -errno
                raise OSError(-rc, f"seccomp rule {name}: {os.strerror(-rc)}")

        for name in ("fork", "vfork", "mknod", "mknodat", "ptrace", "process_vm_readv", "process_vm_writev",
                     "pidfd_open", "pidfd_getfd", "pidfd_send_signal", "kcmp", "tkill", "socket",
                     "io_uring_setup", "io_uring_enter", "io_uring_register", "mount", "umount2", "pivot_root",
                     "chroot", "unshare", "setns", "move_mount", "open_tree", "fsopen", "fsconfig", "fsmount",
                     "fspick", "mount_setattr", "bpf", "perf_event_open", "userfaultfd", "keyctl", "add_key",
                     "request_key", "init_module", "finit_module", "delete_module", "kexec_load", "kexec_file_load",
                     "reboot", "swapon", "swapoff", "acct", "quotactl", "setrlimit", "settimeofday", "clock_settime",
                     "clock_adjtime", "adjtimex", "syslog", "name_to_handle_at", "open_by_handle_at", "ioperm",
                     "iopl", "modify_ldt", "uselib", "vhangup", "lookup_dcookie"):
            rule(eperm, name)
        rule(enosys, "clone3")
        rule(eperm, "clone", Cmp(0, masked_eq, clone_thread, 0))  # a new process, not a thread
        for name in ("kill", "tgkill", "rt_sigqueueinfo", "rt_tgsigqueueinfo"):
            rule(eperm, name, Cmp(0, ne, pid, 0))  # signals only to itself
        rule(eperm, "prlimit64", Cmp(2, ne, 0, 0))  # reading limits stays
        for request in (0x5412, 0x541C):  # TIOCSTI, TIOCLINUX
            rule(eperm, "ioctl", Cmp(1, masked_eq, 0xFFFFFFFF, request))
        rc = lib.seccomp_load(ctx)
        if rc < 0:
            raise OSError(-rc, f"seccomp_load: {os.strerror(-rc)}")
    finally:
        lib.seccomp_release(ctx)


_GUARD_SOURCE = '''
import os


def _guard(event, args, _tmp={tmp!r}, _pid={pid!r}, _dynload={dynload!r},
           _denied_modules={denied_modules!r}, _dev_ok={dev_ok!r}, _path_events={path_events!r},
           _denied_prefixes={denied_prefixes!r}, _denied_events={denied_events!r}, _last_pyc=[None],
           _type=type, _isinstance=isinstance, _str=str, _bytes=bytes, _int=int, _bool=bool, _memoryview=memoryview, _len=len, _range=range,
           _sjoin=str.join, _bjoin=bytes.join, _to_int=int.__index__, _lstat=os.lstat, _stat=os.stat,
           _readlink=os.readlink, _osopen=os.open, _osread=os.read, _osclose=os.close, _islink=__import__("stat").S_ISLNK,
           _isdir=__import__("stat").S_ISDIR, _perm=PermissionError, _imp_error=ImportError, _oserror=OSError,
           _writing_flags={writing_flags!r}, _dir_flags={dir_flags!r}, _function=type(lambda: 0), _code=_CODE):
    # Every name used here is a positional default bound when the hook was made: an immutable
    # tuple, holding only immutable values (but _last_pyc, checked again where used); replacing
    # this function's __defaults__ or __code__ is denied below. Methods are only called on exact
    # str/bytes/int/list values, whose types cannot be patched.

    def text(path):  # str, bytes or int (a file descriptor); anything else could change under us
        t = _type(path)
        if t is not _str and t is not _bytes and t is not _int and t is not _bool:
            if _isinstance(path, _str):  # a subclass: its characters, not its methods (fails closed)
                path = _sjoin("", [path])
            elif _isinstance(path, _bytes):
                path = _bjoin(b"", [path])
            elif _isinstance(path, _int):
                return _to_int(path)
            else:
                raise _perm("sandbox: pass paths as str or bytes, not " + t.__name__)
        if _type(path) is _bytes:
            path = path.decode("utf-8", "surrogateescape")
        return path

    def norm(path, base=_tmp):  # absolute, without . and .. (lexical)
        if not path.startswith("/"):
            path = base + "/" + path
        parts = []
        for part in path.split("/"):
            if part == "..":
                if parts:
                    parts.pop()
            elif part and part != ".":
                parts.append(part)
        return "/" + "/".join(parts)

    def resolve(path):  # ``norm`` with symbolic links followed (as the kernel will)
        todo = [p for p in path.split("/") if p][::-1]
        done, hops = "", 0
        while todo:
            part = todo.pop()
            if part == ".":
                continue
            if part == "..":
                done = done.rsplit("/", 1)[0]
                continue
            here = done + "/" + part
            try:
                st = _lstat(here)
            except _oserror:
                done = here
                continue
            if _islink(st.st_mode):
                hops += 1
                if hops > 40:
                    raise _perm("sandbox: too many symbolic links")
                target = _readlink(here)
                if target.startswith("/"):
                    done = ""
                todo.extend([p for p in target.split("/") if p][::-1])
            else:
                done = here
        return done or "/"

    def fd_path(fd):
        try:
            return _readlink("/proc/self/fd/" + _str(fd))
        except _oserror:
            raise _perm("sandbox: unknown file descriptor")

    def within(path):
        return path == _tmp or path.startswith(_tmp + "/")

    def inside(path, dir_fd=None):  # the path (relative to dir_fd if one is given) is in the folder
        path = text(path)
        if _type(path) is _int:
            target = fd_path(path)
            return within(target)
        base = _tmp if dir_fd is None or dir_fd == -1 or dir_fd == -100 else fd_path(text(dir_fd))
        lexical = norm(path, base)
        return within(base) and within(lexical) and within(resolve(lexical))

    def deny(what):
        raise _perm("sandbox: " + what + " is not allowed")

    if event == "open":
        path, mode, flags = args
        path = text(path)
        mode = None if mode is None else text(mode)
        if _type(path) is _int:
            return
        if flags is None or flags == -1:
            flags = 0
        writing = ((mode is not None and ("w" in mode or "a" in mode or "x" in mode or "+" in mode))
                   or (flags & _writing_flags) != 0)
        lexical = norm(path)
        real = resolve(lexical)
        if writing:
            if not (within(lexical) and within(real)):
                deny("writing outside the temporary directory")
            return
        if real.startswith("/proc/"):
            who = real.split("/")[2]
            if who.isdigit() and who != _str(_pid):
                deny("reading another process's /proc entry")
        if real.startswith("/dev/") and real not in _dev_ok:
            deny("opening " + real)
        if not within(real):
            is_dir = (flags & _dir_flags) != 0
            if not is_dir:
                try:
                    is_dir = _isdir(_stat(real).st_mode)
                except _oserror:
                    pass
            if is_dir:
                deny("opening a directory outside the temporary directory")
        if real.endswith(".pyc"):
            _last_pyc[0] = real
        return
    for name, paths, dir_fds in _path_events:
        if name != event:
            continue
        for i in _range(_len(paths)):
            p = paths[i]
            if p < _len(args) and args[p] is not None:
                d = dir_fds[i]
                if not inside(args[p], args[d] if d is not None and d < _len(args) else None):
                    deny(event + " outside the temporary directory")
        return
    if event == "os.chdir":
        target = text(args[0])
        target = fd_path(target) if _type(target) is _int else resolve(norm(target))
        if target != _tmp:
            deny("changing directory")
        return
    if event == "import":
        name = text(args[0])
        if name in _denied_modules or name.split(".")[0] in _denied_modules:
            raise _imp_error("sandbox: import of " + name + " is not allowed")
        if _len(args) > 1 and args[1] is not None:  # a C extension being loaded from this file
            where = resolve(norm(text(args[1])))
            for d in _dynload:
                if where.startswith(d + "/"):
                    return
            raise _imp_error("sandbox: C extension " + name + " from outside the standard library")
        return
    if event == "object.__setattr__" or event == "object.__delattr__":  # "= None" is a deletion
        if (_len(args) > 1 and args[1] in ("__code__", "__defaults__", "__kwdefaults__")
                and _type(args[0]) is _function and args[0].__code__ is _code):
            deny("replacing the audit hook's code or defaults")
        return
    if event == "marshal.loads":
        data = args[0]
        t = _type(data)
        if not (t is _bytes or (t is _memoryview and _type(data.obj) is _bytes)):
            deny("marshal.loads of mutable data")
        pyc = _last_pyc[0]  # the program may have changed it: checked again here
        ok = pyc is not None and pyc.endswith(".pyc") and not within(pyc)
        if ok:
            fd = _osopen(pyc, 0)
            try:
                chunks = []
                while True:
                    chunk = _osread(fd, 1 << 20)
                    if not chunk:
                        break
                    chunks.append(chunk)
            finally:
                _osclose(fd)
            ok = _bjoin(b"", chunks)[16:] == _bytes(data)
        if not ok:
            deny("loading bytecode that is not an installed module's")
        return
    if event in _denied_events or event.startswith(_denied_prefixes):
        deny(event)
'''

# audit event -> (positions of path arguments, position of the dir_fd for each, or None)
_PATH_EVENTS = {
    "os.rename": ((0, 1), (2, 3)), "os.link": ((0, 1), (2, 3)), "os.remove": ((0,), (1,)),
    "os.rmdir": ((0,), (1,)), "os.mkdir": ((0,), (2,)), "os.chmod": ((0,), (2,)), "os.chown": ((0,), (3,)),
    "os.utime": ((0,), (3,)), "os.truncate": ((0,), (None,)), "os.setxattr": ((0,), (None,)),
    "os.removexattr": ((0,), (None,)), "os.chflags": ((0,), (None,)), "os.lchflags": ((0,), (None,)),
    "shutil.copyfile": ((1,), (None,)), "shutil.copymode": ((1,), (None,)), "shutil.copystat": ((1,), (None,)),
    "shutil.copytree": ((1,), (None,)), "shutil.rmtree": ((0,), (1,)), "shutil.move": ((0, 1), (None, None)),
    "shutil.chown": ((0,), (None,)), "shutil.make_archive": ((0,), (None,)), "shutil.unpack_archive": ((1,), (None,)),
}
_DENIED_EVENTS = ("os.symlink", "code.__new__", "marshal.load", "sqlite3.connect",
                  "sqlite3.enable_load_extension", "sqlite3.load_extension", "fcntl.ioctl", "os.forkpty",
                  "os.system", "os.startfile", "os.kill", "os.killpg", "signal.pthread_kill", "resource.setrlimit",
                  "resource.prlimit", "sys.remote_exec", "webbrowser.open")
_DENIED_PREFIXES = ("socket.", "subprocess.", "os.exec", "os.spawn", "os.posix_spawn", "os.fork", "pty.", "ctypes.",
                    "syslog.", "_posixsubprocess.", "winreg.", "msvcrt.")
# modules whose C code opens files, starts processes, reaches memory or escapes the hook unaudited
_DENIED_MODULES = frozenset({
    "ctypes", "_ctypes", "cffi", "_cffi_backend", "_posixsubprocess", "_xxsubinterpreters", "_xxinterpchannels",
    "_interpreters", "_interpchannels", "_interpqueues", "concurrent.interpreters", "_testcapi", "_testinternalcapi",
    "_testbuffer", "_testimportmultiple", "_testmultiphase", "_testsinglephase", "_testclinic", "_testlimitedcapi",
    "_testexternalinspection", "_remote_debugging", "_xxtestfuzz", "_dbm", "_gdbm", "_posixshmem",
    "_multiprocessing", "readline", "_ssl", "_tkinter"})


def _remove_unaudited() -> None:
    """Remove the functions that change files or reach other processes without raising an audit
    event (mknod creates regular files too). Best effort: a determined program can rebuild the
    module (``_imp.create_builtin``); Landlock or read-only mounts are what stops it then."""
    import _signal
    import posix

    for module, names in ((posix, ("mknod", "mkfifo", "pidfd_open")), (os, ("mknod", "mkfifo", "pidfd_open")),
                          (_signal, ("pidfd_send_signal",))):
        for name in names:
            if hasattr(module, name):
                delattr(module, name)


def _install_guard(tmp: str, dynload: list[str]) -> None:
    source = _GUARD_SOURCE.format(
        tmp=tmp, pid=os.getpid(), dynload=tuple(dynload), denied_modules=_DENIED_MODULES,
        dev_ok=frozenset({"/dev/null", "/dev/zero", "/dev/random", "/dev/urandom", "/dev/full"}),
        path_events=tuple((event, *where) for event, where in _PATH_EVENTS.items()),
        denied_prefixes=_DENIED_PREFIXES, denied_events=frozenset(_DENIED_EVENTS),
        writing_flags=os.O_WRONLY | os.O_RDWR | os.O_CREAT | os.O_TRUNC | os.O_APPEND,
        dir_flags=os.O_DIRECTORY | getattr(os, "O_PATH", 0))
    module = compile(source, "<sandbox guard>", "exec")
    scope = {"_CODE": next(c for c in module.co_consts if getattr(c, "co_name", "") == "_guard")}
    exec(module, scope)  # the function made from that very code object: how the hook knows itself
    sys.addaudithook(scope.pop("_guard"))


def _program_main(spec: dict) -> None:
    """The sandboxed program's process: confine, then run the program; in check mode, answer calls."""
    tmp, replies = spec["tmp"], spec["replies"]

    def send(message) -> None:
        data = _dumps(message)
        view = memoryview(data)
        while view:
            view = view[os.write(replies, view):]

    try:
        if spec["isolation"] == "namespaces" and not spec.get("locked"):
            failed = _lock_down(tmp)
            if failed:
                print(f"sandbox: mounts left writable: {failed}", file=sys.stderr)
            os.chdir(tmp)  # enter the writable bind mount (the old cwd is on the read-only one)
            # a fresh interpreter that never loaded ctypes (a loaded C extension comes back by file
            # path without an import event, and ctypes calls through a function pointer are not audited)
            os.execv(sys.executable, [sys.executable, "-I", "-S", "-B", os.path.abspath(__file__), "program",
                                      json.dumps({**spec, "locked": True})])
        if "_ctypes" in sys.modules:
            raise RuntimeError("ctypes is loaded in the program's interpreter")
        _remove_unaudited()
        with open(spec["program"], encoding="utf-8") as f:
            source = f.read()
        requests = os.fdopen(spec["requests"], "rb")
        if spec["guard"]:
            _install_guard(tmp, spec["dynload"])
    except BaseException as e:  # noqa: BLE001 — fail closed: no layer, no run
        print(f"sandbox setup failed: {type(e).__name__}: {e}", file=sys.stderr)
        os._exit(_SETUP_FAILED)
    namespace = {"__name__": "__main__", "__file__": spec["program"], "__builtins__": __builtins__}
    try:
        exec(compile(source, spec["program"], "exec"), namespace)
    except BaseException as e:  # noqa: BLE001 — SystemExit and KeyboardInterrupt included: not an end
        import traceback

        traceback.print_exc()
        sys.stderr.flush()
        send(["error", f"{type(e).__name__}: {e}"[:500]])
        os._exit(1)
    sys.stdout.flush()
    if spec["entry_point"] is None:
        send(["done"])
        return
    send(["ready"])
    for line in requests:
        notes: set = set()
        try:
            args, kwargs = _from_wire(json.loads(line))
            result = namespace[spec["entry_point"]](*args, **kwargs)
        except BaseException as e:  # noqa: BLE001 — reported to the checker, which fails the test
            send(["raised", type(e).__name__, str(e)[:1000]])
            continue
        try:
            reply = ["ok", _to_wire(result, notes), sorted(notes)]
        except (TypeError, ValueError, RecursionError) as e:
            reply = ["unsupported", str(e)[:200]]
        send(reply)


# --- SQL ----------------------------------------------------------------------------------------

SQL_ISOLATION = "sqlite-readonly"  # what contains generated SQL: the read-only connection below, in-process


class QueryError(Exception):
    """A generated query that failed, was denied, ran too long, or returned too much."""


def _authorize(action: int, arg1, arg2, db_name, trigger) -> int:
    import sqlite3

    if action in (sqlite3.SQLITE_SELECT, sqlite3.SQLITE_READ, sqlite3.SQLITE_RECURSIVE):
        return sqlite3.SQLITE_OK
    if action == sqlite3.SQLITE_FUNCTION and (arg2 or "").lower() != "load_extension":
        return sqlite3.SQLITE_OK
    return sqlite3.SQLITE_DENY


def readonly_query(db_path, sql: str, timeout_s: float = 5.0, max_rows: int = 100_000,
                   max_value_bytes: int = 10_000_000) -> list[tuple]:
    """Rows of one read-only statement on ``db_path``; :class:`QueryError` on any failure."""
    import sqlite3
    import time
    from pathlib import Path

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
    if sys.argv[1:2] == ["supervise"]:
        _supervise()
    elif sys.argv[1:2] == ["program"]:
        _program_main(json.loads(sys.argv[2]))
