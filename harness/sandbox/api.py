"""The harness's side: :func:`check_candidate` (grade a completion), :func:`run_python` (run a whole
program — for tests of the sandbox; its ``passed`` is the program's own claim, never a grade)."""
from __future__ import annotations

import json
import os
import secrets
import subprocess
import sys
import tempfile

from . import levels
from .view import DENIED_MODULES

SANDBOX_TAG = "harness-sandbox-"
MAX_TIMEOUT_S = 600.0  # one program's (or SQL query's) wall-clock limit
MIN_MEMORY_MB, MAX_MEMORY_MB = 64, 1 << 20  # below 64 MB the interpreter cannot start
_RANGES = {"timeout_s": (0.0, MAX_TIMEOUT_S, False), "memory_mb": (MIN_MEMORY_MB, MAX_MEMORY_MB, True),
           "max_processes": (1, 4096, True), "max_file_mb": (1, 1 << 20, True), "max_open_files": (16, 1 << 16, True),
           "disk_mb": (1, 1 << 20, True)}


def limit_problem(name: str, value) -> str | None:
    """Why ``value`` is not a valid :class:`PythonLimits` ``name`` (its range), or None."""
    import math

    low, high, integer = _RANGES[name]
    number = isinstance(value, int) if integer else isinstance(value, (int, float))
    if number and not isinstance(value, bool) and math.isfinite(value) and low <= value <= high and \
            (integer or value > low):
        return None
    return (f"{name} must be {'an integer >=' if integer else 'a number >'} {low} and <= {high}, got {value!r}")


class PythonLimits:
    """Per-run limits (a plain class, shared with the standard-library-only parts)."""

    __slots__ = ("timeout_s", "memory_mb", "max_processes", "max_file_mb", "max_open_files", "disk_mb")

    def __init__(self, timeout_s: float = 10.0, memory_mb: int = 1024, max_processes: int = 16,
                 max_file_mb: int = 16, max_open_files: int = 128, disk_mb: int = 64):
        self.timeout_s = timeout_s
        self.memory_mb = memory_mb
        self.max_processes = max_processes  # processes and threads of the program's uid
        self.max_file_mb = max_file_mb
        self.max_open_files = max_open_files
        self.disk_mb = disk_mb  # everything it writes, together
        for name in self.__slots__:
            problem = limit_problem(name, getattr(self, name))
            if problem:
                raise ValueError(f"PythonLimits: {problem}")

    def __repr__(self):
        return "PythonLimits(" + ", ".join(f"{k}={getattr(self, k)!r}" for k in self.__slots__) + ")"


class RunResult:
    """What a sandboxed run produced. ``passed``: for :func:`check_candidate` the checker's verdict;
    for :func:`run_python` that the program ran to its end (its own claim). ``flags`` name results
    that were not plain data (``sent as int``: a subclass converted; ``not plain data``). Reported by
    the audit hook, whether or not the kernel then let it: ``files``, paths it opened or listed with
    no reason to (outside its folder, the standard library and ``/dev/{null,zero,urandom}``);
    ``denied``, what the hook refused (``import of _posixsubprocess``, ``socket.__new__``...)."""

    __slots__ = ("passed", "returncode", "timed_out", "stdout", "stderr", "isolation", "layers", "reason", "flags",
                 "files", "denied")

    def __init__(self, passed: bool, returncode: int | None, timed_out: bool, stdout: str, stderr: str,
                 isolation: str = "", layers: tuple[str, ...] = (), reason: str = "", flags: tuple[str, ...] = (),
                 files: tuple[str, ...] = (), denied: tuple[str, ...] = ()):
        self.passed, self.returncode, self.timed_out = passed, returncode, timed_out
        self.stdout, self.stderr = stdout, stderr
        self.isolation, self.layers, self.reason = isolation, tuple(layers), reason
        self.flags, self.files, self.denied = tuple(flags), tuple(files), tuple(denied)

    def __repr__(self):
        return "RunResult(" + ", ".join(f"{k}={getattr(self, k)!r}" for k in self.__slots__
                                        if k not in ("stdout", "stderr")) + ")"


def run_python(source: str, limits: PythonLimits | None = None, audit_guard: bool = True,
               isolation: str | None = None) -> RunResult:
    """Run ``source`` as ``__main__`` in the sandbox. ``isolation``: ``None`` = ``namespaces`` (or what
    ``HARNESS_SANDBOX`` opts in to), ``"fallback"``/``"weak"`` opt in to the fallback, ``"namespaces"``
    requires it (see :mod:`.levels`); ``audit_guard=False`` leaves out the audit hook (to test the
    kernel layers alone). ``limits``: :class:`PythonLimits`' defaults unless given."""
    return _supervised(source, limits or PythonLimits(), audit_guard, isolation, None)


def check_candidate(program: str, entry_point: str, test: str, test_context: str = "",
                    limits: PythonLimits | None = None, audit_guard: bool = True,
                    isolation: str | None = None) -> RunResult:
    """Run ``program`` in the sandbox and ``test_context`` + ``test`` + ``check(candidate)`` in the
    checker, where ``candidate`` (and the name ``entry_point``) calls ``program``'s ``entry_point``
    with copies of its arguments and returns a plain-data copy of its result. ``passed`` is the
    checker's verdict: ``check`` returned normally (see :mod:`harness.sandbox`)."""
    return _supervised(program, limits or PythonLimits(), audit_guard, isolation,
                       {"entry_point": entry_point, "test": test, "test_context": test_context})


def _checker_command() -> list[str]:
    code = (f"import sys; sys.path.insert(0, {levels.PACKAGE_PARENT!r}); "
            "from harness.sandbox.checker import main; main()")
    return [sys.executable, "-I", "-S", "-B", "-c", code]


def _supervised(source: str, limits: PythonLimits, audit_guard: bool, isolation: str | None,
                check: dict | None) -> RunResult:
    level = levels.resolve(isolation)
    layers = levels.isolation_layers(level, audit_guard)
    nonce = secrets.token_hex(16)
    with tempfile.TemporaryDirectory(prefix=SANDBOX_TAG, ignore_cleanup_errors=True) as tmp:
        tmp = os.path.realpath(tmp)
        job = {"nonce": nonce, "timeout_s": limits.timeout_s, "check": check, "program": source, "guard": audit_guard,
               "denied_modules": sorted(DENIED_MODULES), "plan": levels.plan(level, tmp, limits)}
        try:
            proc = subprocess.run(_checker_command(), input=json.dumps(job).encode(), capture_output=True, cwd=tmp,
                                  env={"PATH": "/usr/bin:/bin", "LANG": "C.UTF-8"}, start_new_session=True,
                                  timeout=limits.timeout_s + 30)  # the checker keeps time; this is its own limit
        except subprocess.TimeoutExpired:  # killed; its program dies with it (parent-death signal)
            return RunResult(False, None, True, "", "", level, layers, "the checker did not answer in time")
    verdict = _verdict(proc.stdout, nonce)
    if verdict is None:
        tail = proc.stderr.decode("utf-8", "replace")[-2000:]
        return RunResult(False, None, False, "", tail, level, layers,
                         f"no verdict from the checker (exit code {proc.returncode})")
    return RunResult(bool(verdict["passed"]), verdict["returncode"], bool(verdict["timed_out"]), verdict["stdout"],
                     verdict["stderr"], level, layers, verdict["reason"], verdict["flags"], verdict["files"],
                     verdict["denied"])


def _verdict(stdout: bytes, nonce: str) -> dict | None:
    """The last line of the checker's stdout that carries the nonce."""
    for line in stdout.decode("utf-8", "replace").splitlines()[::-1]:
        try:
            candidate = json.loads(line)
        except ValueError:
            continue
        if isinstance(candidate, dict) and candidate.get("nonce") == nonce:
            return candidate
    return None
