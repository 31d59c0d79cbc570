"""Landlock (Linux ≥ 5.13): the files the program may touch, by path, whatever its uid. Rules come
from :mod:`harness.sandbox.view`, as ``(path, right)`` with right one of:

- ``list``: list this folder (not read the files in it);
- ``read``: read files and list folders beneath the path;
- ``exec``: read and execute (the interpreter and its loader: nothing else can be executed);
- ``device``: read and write this one device file (``/dev/null``);
- ``write``: everything beneath but executing (the program's own temporary folder, namespaces
  mode: a ``noexec`` tmpfs);
- ``write-only``: ``write`` without reading files;
- ``write-existing``: ``write-only`` without creating anything (no file, folder, link, socket, FIFO,
  device): the fallback's temporary folder, a host folder. What the program writes there it cannot map,
  so never load as native code; and it writes only the files the checker made (``program.py``), each
  at most ``RLIMIT_FSIZE``: the folder's disk quota by construction.

Also, where the kernel's ABI has them: no TCP bind or connect (ABI ≥ 4), no device ``ioctl``
outside the temporary folder (ABI ≥ 5), no signals and no abstract unix sockets out of the
sandbox (ABI ≥ 6).
"""
from __future__ import annotations

import ctypes
import os
import stat

from .libc import check, libc

NR_CREATE_RULESET, NR_ADD_RULE, NR_RESTRICT_SELF = 444, 445, 446  # the same on every architecture
_CREATE_RULESET_VERSION = 1
_EXECUTE, _WRITE_FILE, _READ_FILE, _READ_DIR = 1, 2, 4, 8
_TRUNCATE, _IOCTL_DEV = 1 << 14, 1 << 15
_MAKE = sum(1 << b for b in range(6, 13)) | 1 << 13  # make char/dir/reg/sock/fifo/block/sym, refer (links, moves)
_FILE_RIGHTS = _EXECUTE | _WRITE_FILE | _READ_FILE | _TRUNCATE | _IOCTL_DEV  # what a rule on a file may hold


def abi() -> int:
    """The kernel's Landlock ABI version, 0 where it has none."""
    return max(0, int(libc().syscall(NR_CREATE_RULESET, None, 0, _CREATE_RULESET_VERSION)))


def _handled(version: int) -> int:
    writes = sum(1 << b for b in range(4, 13)) | _WRITE_FILE  # remove dir/file, make char/dir/reg/sock/fifo/block/sym
    if version >= 2:
        writes |= 1 << 13  # REFER
    if version >= 3:
        writes |= _TRUNCATE
    if version >= 5:
        writes |= _IOCTL_DEV
    return writes | _READ_FILE | _READ_DIR | _EXECUTE


class _RulesetAttr(ctypes.Structure):
    _fields_ = [("fs", ctypes.c_uint64), ("net", ctypes.c_uint64), ("scoped", ctypes.c_uint64)]


class _PathBeneath(ctypes.Structure):
    _pack_ = 1
    _fields_ = [("allowed", ctypes.c_uint64), ("parent_fd", ctypes.c_int32)]


def restrict(rules: list[tuple[str, str]], version: int) -> None:
    """Restrict this process (and what it executes) to ``rules``. Needs ``no_new_privs`` first.
    A path that does not exist is skipped (nothing to allow); any other failure raises."""
    handled = _handled(version)
    rights = {"list": _READ_DIR, "read": _READ_FILE | _READ_DIR, "exec": _READ_FILE | _EXECUTE,
              "device": _READ_FILE | _WRITE_FILE | _TRUNCATE, "write": handled & ~_EXECUTE,
              "write-only": handled & ~_EXECUTE & ~_READ_FILE,
              "write-existing": handled & ~_EXECUTE & ~_READ_FILE & ~_MAKE}
    attr = _RulesetAttr(handled, 3 if version >= 4 else 0, 3 if version >= 6 else 0)  # net: bind+connect TCP
    lib = libc()
    ruleset = check(lib.syscall(NR_CREATE_RULESET, ctypes.byref(attr), ctypes.sizeof(attr), 0),
                    "landlock_create_ruleset")
    try:
        for path, right in rules:
            try:
                fd = os.open(path, os.O_PATH | os.O_CLOEXEC)
            except FileNotFoundError:
                continue
            try:
                access = rights[right] & handled
                if not stat.S_ISDIR(os.fstat(fd).st_mode):
                    access &= _FILE_RIGHTS
                rule = _PathBeneath(access, fd)
                check(lib.syscall(NR_ADD_RULE, ruleset, 1, ctypes.byref(rule), 0), f"landlock rule {path}")
            finally:
                os.close(fd)
        check(lib.syscall(NR_RESTRICT_SELF, ruleset, 0), "landlock_restrict_self")
    finally:
        os.close(ruleset)
