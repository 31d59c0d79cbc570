"""The kernel layers, applied in the program's process after ``fork`` and before ``exec`` starts its
interpreter — so they hold from the interpreter's first instruction, whatever Python then runs
(the audit hook is only a second layer). Order matters; each step needs the one before:

1. split off the keeper (:mod:`.keeper`), which kills the program if the checker dies; limits;
2. namespaces mode: new mount/network/IPC/UTS/cgroup namespaces (the PID namespace was entered by
   the checker), then the mount view (:mod:`.mounts`);
3. the uid: not root, no capabilities, ``no_new_privs`` (:mod:`.uid`);
4. Landlock, where the kernel has it (:mod:`.landlock`);
5. seccomp, deny by default (:mod:`.seccomp`) — last, as it forbids what the steps above use.

In the fallback the program's folder is a host folder: before the uid changes, the one file the program
writes there (``program.py``) is made for it, and then nothing more can be created there (Landlock's
``write-existing``; seccomp refuses what Landlock does not see, or every creation without Landlock); with
``RLIMIT_FSIZE`` at most the disk quota
(:func:`harness.sandbox.levels.plan`), what the folder holds stays within the quota by construction.

Any failure ends the process with :data:`SETUP_FAILED` and the reason on its stderr: no layer, no run.
"""
from __future__ import annotations

import os
import signal

from . import keeper, landlock, mounts, namespaces, rlimits, seccomp, uid
from .libc import PR_SET_PDEATHSIG, prctl

SETUP_FAILED = 3  # the program's exit code when a layer could not be applied


def confine(plan: dict) -> None:
    """Apply ``plan`` (made by :func:`harness.sandbox.levels.plan`) to this process. For
    ``subprocess.Popen(preexec_fn=...)``: never returns on failure."""
    try:
        keeper.split()
        rlimits.apply(plan["rlimits"])
        tmp, identity = plan["tmp"], plan["uid"]
        if plan["mode"] == "namespaces":
            namespaces.isolate()
            owner = (identity["uid"], identity["gid"]) if identity else (0, 0)
            mounts.build(plan["view"], tmp, plan["disk_mb"], owner)
        else:
            _make_program_file(tmp, identity)
            if identity and not identity["real_only"]:
                os.chown(tmp, identity["uid"], identity["gid"])
        uid.drop(identity)
        prctl(PR_SET_PDEATHSIG, signal.SIGKILL, "parent-death signal")  # after the uid change, which clears it
        if plan["landlock"]:
            landlock.restrict([tuple(r) for r in plan["landlock_rules"]], plan["landlock"])
        if plan["seccomp"]:
            seccomp.install(os.getpid(), create="any" if plan["mode"] == "namespaces"
                            else "named" if plan["landlock"] else "none")
    except BaseException as e:  # noqa: BLE001 — fail closed
        os.write(2, f"sandbox setup failed: {type(e).__name__}: {e}\n".encode())
        os._exit(SETUP_FAILED)


PROGRAM_FILE = "program.py"  # the one file the program writes in its folder (its source, for tracebacks)


def _make_program_file(tmp: str, identity: dict | None) -> None:
    """Fallback: ``program.py`` made empty in the program's folder (and given to its uid), before the program
    loses the right to create files there."""
    fd = os.open(os.path.join(tmp, PROGRAM_FILE), os.O_WRONLY | os.O_CREAT | os.O_TRUNC | os.O_NOFOLLOW | os.O_CLOEXEC,
                 0o600)
    try:
        if identity and not identity["real_only"]:
            os.fchown(fd, identity["uid"], identity["gid"])
    finally:
        os.close(fd)
