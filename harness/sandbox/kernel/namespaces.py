"""Namespaces (the namespaces mode): the program is PID 1 of a PID namespace of its own (every
process it could leave behind dies with it; it sees no other process), with its own mount,
network (no interface but a down loopback), IPC, UTS and cgroup namespaces.

The checker enters the PID namespace *for its children* before it starts the program (so the
program is PID 1 from its first instruction); not root, it first makes a user namespace in which it
is root (its own uid mapped to 0), which owns the namespaces the program then creates.
"""
from __future__ import annotations

import os

from .libc import CLONE_NEWCGROUP, CLONE_NEWIPC, CLONE_NEWNET, CLONE_NEWNS, CLONE_NEWPID, CLONE_NEWUSER
from .libc import CLONE_NEWUTS, MS_PRIVATE, MS_REC, mount, unshare


def _write(path: str, text: str) -> None:
    fd = os.open(path, os.O_WRONLY)
    try:
        os.write(fd, text.encode())
    finally:
        os.close(fd)


def enter_for_children() -> bool:
    """In the checker: its next child starts a new PID namespace. Returns whether a user namespace
    had to be made (not root)."""
    if os.geteuid() == 0:
        unshare(CLONE_NEWPID)
        return False
    uid, gid = os.getuid(), os.getgid()
    unshare(CLONE_NEWUSER | CLONE_NEWPID)
    _write("/proc/self/setgroups", "deny")
    _write("/proc/self/uid_map", f"0 {uid} 1")
    _write("/proc/self/gid_map", f"0 {gid} 1")
    return True


def isolate() -> None:
    """In the program's process (PID 1 of the new PID namespace), before its mounts are built."""
    unshare(CLONE_NEWNS | CLONE_NEWNET | CLONE_NEWIPC | CLONE_NEWUTS | CLONE_NEWCGROUP)
    mount(None, "/", None, MS_REC | MS_PRIVATE)


def probe() -> None:
    """Exit 0 when this host lets the checker build the namespaces (run in a throwaway process)."""
    import tempfile

    try:
        enter_for_children()
        folder = tempfile.mkdtemp(prefix="harness-sandbox-probe-")
    except OSError:
        os._exit(1)
    pid = os.fork()
    if pid == 0:
        try:
            isolate()
            mount("tmpfs", folder, "tmpfs", 0, "size=4k")
            os._exit(0)
        except BaseException:  # noqa: BLE001 — any failure means "not available"
            os._exit(1)
    _, status = os.waitpid(pid, 0)
    os.rmdir(folder)
    os._exit(0 if os.waitstatus_to_exitcode(status) == 0 else 1)
