"""Who the program is: not root, no capabilities, ``no_new_privs``.

Run as root (the usual case in containers and CI), the program gets a uid of its own: ``UID_BASE``
plus the checker's pid, unused by anything else, so that ``RLIMIT_NPROC`` (which never binds uid 0)
counts this run's processes and threads only, and no two runs share an identity. Where the
interpreter lies in a folder only root may enter (``/root/.pyenv``) and no mount view can move it
(the fallback), only the *real* uid changes — ``RLIMIT_NPROC`` binds by the real uid — the
effective uid stays 0 without any capability, and seccomp refuses every ``set*id`` call. Not root
(a user namespace, or a plain user), the program keeps the invoking user's uid.
"""
from __future__ import annotations

import os

from .libc import PR_CAPBSET_DROP, PR_SET_NO_NEW_PRIVS, PR_SET_SECUREBITS, clear_capabilities, libc, prctl

UID_BASE = 0x5AD00000  # + the checker's pid (< 2**22): a uid no account uses
# SECBIT_NOROOT, SECBIT_NO_CAP_AMBIENT_RAISE and their locks, SECBIT_KEEP_CAPS_LOCKED: an exec as
# euid 0 grants no capability, and none of it can be undone
_SECUREBITS = (1 << 0) | (1 << 1) | (1 << 5) | (1 << 6) | (1 << 7)


def identity(root: bool, real_only: bool, checker_pid: int) -> dict | None:
    """The uid plan for one run (made in the checker, applied by :func:`drop`): ``None`` keeps the
    invoking user's uid (not root); ``real_only``: change the real uid only (see above)."""
    if not root:
        return None
    uid = UID_BASE + checker_pid
    return {"uid": uid, "gid": uid, "real_only": real_only}


def describe(root: bool, real_only: bool, user_namespace: bool) -> str:
    """The uid layer in words (for the run's record)."""
    if not root:
        return ("the invoking user's uid (root only inside its own user namespace, without capabilities)"
                if user_namespace else f"uid {os.getuid()} (the invoking user)")
    if real_only:
        return "a real uid of its own (effective uid 0 without capabilities: the interpreter is in a root-only folder)"
    return "a uid of its own"


def drop(plan: dict | None) -> None:
    """Empty the capability bounding set, lock the secure bits, take the planned uid and gid, clear
    every capability and set ``no_new_privs`` (in that order: each step needs the one before)."""
    lib = libc()
    for cap in range(64):
        lib.prctl(PR_CAPBSET_DROP, cap, 0, 0, 0)  # EINVAL past the last capability; EPERM when none is held
    if lib.prctl(PR_SET_SECUREBITS, _SECUREBITS, 0, 0, 0) != 0 and plan is not None:
        prctl(PR_SET_SECUREBITS, _SECUREBITS, "securebits")  # root must manage it: fail with the reason
    if plan is not None:
        uid, gid = plan["uid"], plan["gid"]
        os.setgroups([])
        if plan["real_only"]:
            os.setresgid(gid, os.getegid(), os.getegid())
            os.setresuid(uid, os.geteuid(), os.geteuid())
        else:
            os.setresgid(gid, gid, gid)
            os.setresuid(uid, uid, uid)
    clear_capabilities()
    prctl(PR_SET_NO_NEW_PRIVS, 1, "no_new_privs")
