"""Running model-generated code and SQL so that it can neither escape nor forge its grade.

**Who decides "passed".** Generated code can do anything inside its own interpreter, so no verdict
is produced there. :func:`check_candidate` runs three processes: the harness, a trusted *checker*
(:mod:`.checker`) that runs the problem's test, and the sandboxed *program*, which receives the
test's calls as plain data and answers with plain data (:mod:`.wire`). The verdict travels with a
nonce on the checker's stdout, which the program never holds; a rigged ``__eq__``, a patched
helper or an early exit cannot cross.

**The wall holds by construction** (:mod:`.kernel`), applied between ``fork`` and ``exec`` of the
program's interpreter, so it holds whatever Python — or native code — then runs:

- a mount view (:mod:`.view`, :mod:`.kernel.mounts`): only the interpreter, its standard library
  without ``site-packages`` or the dangerous C extensions, the libraries they load, ``/dev/null``,
  ``/dev/zero``, ``/dev/urandom`` and a private size-limited tmpfs (the disk quota) — no dataset,
  answer key, results, harness source, ``/home``, ``/root``, ``/run``, ``/tmp`` or ``/work``;
- PID, network (no interface), IPC, UTS and cgroup namespaces (:mod:`.kernel.namespaces`);
- an unprivileged uid with no capabilities and ``no_new_privs`` (:mod:`.kernel.uid`), so that
  resource limits bind, process limit included (:mod:`.kernel.rlimits`);
- seccomp, deny by default (:mod:`.kernel.seccomp`), and Landlock where the kernel has it
  (:mod:`.kernel.landlock`);
- a trusted keeper process between checker and program (:mod:`.kernel.keeper`): the program dies
  with the checker.

Where namespaces are unavailable the fallback keeps seccomp, Landlock (spelling out the same view
file by file), the uid and the limits; without those layers it is ``weak``. Below ``namespaces``
generated code runs only after an opt-in, and every refusal and record says what the level in
force cannot enforce (:mod:`.levels`). The audit hook (:mod:`.guard`) is a second layer: it
refuses Python-level attempts with a readable reason and reports files the program had no reason
to open (``RunResult.files``).

**SQL** (:mod:`.sql`): each query runs read-only in a worker process with a memory limit and a
hard wall-clock kill, only the SQL functions Spider needs allowed.
"""
import importlib

# public names, imported on first use: the checker and the SQL worker import submodules of this
# package in fresh interpreters, where every millisecond of start-up counts per program
_EXPORTS = {
    "SANDBOX_TAG": "api", "PythonLimits": "api", "RunResult": "api", "check_candidate": "api", "run_python": "api",
    "CandidateError": "channel",
    "ABSENT_ENV": "levels", "FORCE_ENV": "levels", "ISOLATIONS": "levels", "cannot_enforce": "levels",
    "isolation_in_force": "levels", "isolation_layers": "levels", "landlock_abi": "levels",
    "namespaces_available": "levels", "require_isolation": "levels", "seccomp_available": "levels",
    "SQL_ISOLATION": "sql", "QueryError": "sql", "QueryKilled": "sql", "first_statement": "sql",
    "readonly_query": "sql"}
__all__ = sorted(_EXPORTS)


def __getattr__(name: str):
    if name not in _EXPORTS:
        raise AttributeError(f"module 'harness.sandbox' has no attribute {name!r}")
    value = getattr(importlib.import_module(f"harness.sandbox.{_EXPORTS[name]}"), name)
    globals()[name] = value
    return value
