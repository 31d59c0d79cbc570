"""The few libc calls the kernel layers need that ``os`` does not offer (Python 3.11): ``prctl``,
``unshare``, ``mount``, ``umount2``, ``pivot_root``, ``capset``, raw ``syscall``. Every failure
raises :class:`OSError` with the call's name: a layer that cannot be applied stops the run."""
from __future__ import annotations

import ctypes
import os

# prctl options
PR_SET_PDEATHSIG, PR_SET_DUMPABLE, PR_CAPBSET_DROP = 1, 4, 24
PR_SET_SECUREBITS, PR_SET_CHILD_SUBREAPER, PR_SET_NO_NEW_PRIVS = 28, 36, 38
# clone flags (unshare)
CLONE_NEWNS, CLONE_NEWUTS, CLONE_NEWIPC = 0x00020000, 0x04000000, 0x08000000
CLONE_NEWUSER, CLONE_NEWPID, CLONE_NEWNET = 0x10000000, 0x20000000, 0x40000000
CLONE_NEWCGROUP, CLONE_NEWTIME, CLONE_THREAD = 0x02000000, 0x00000080, 0x00010000
NAMESPACE_FLAGS = (CLONE_NEWNS | CLONE_NEWUTS | CLONE_NEWIPC | CLONE_NEWUSER | CLONE_NEWPID | CLONE_NEWNET
                   | CLONE_NEWCGROUP | CLONE_NEWTIME)
# mount flags
MS_RDONLY, MS_NOSUID, MS_NODEV, MS_NOEXEC = 1, 2, 4, 8
MS_REMOUNT, MS_BIND, MS_REC, MS_PRIVATE = 32, 4096, 16384, 1 << 18
MNT_DETACH = 2

_LIBC = None


def libc():
    """The C library, loaded once per process (``errno`` kept for the messages)."""
    global _LIBC
    if _LIBC is None:
        lib = ctypes.CDLL(None, use_errno=True)
        lib.syscall.restype = ctypes.c_long
        lib.mount.argtypes = [ctypes.c_char_p, ctypes.c_char_p, ctypes.c_char_p, ctypes.c_ulong, ctypes.c_void_p]
        lib.umount2.argtypes = [ctypes.c_char_p, ctypes.c_int]
        lib.prctl.argtypes = [ctypes.c_int, ctypes.c_ulong, ctypes.c_ulong, ctypes.c_ulong, ctypes.c_ulong]
        _LIBC = lib
    return _LIBC


def check(rc: int, what: str) -> int:
    """``rc`` when it is not negative, else :class:`OSError` naming ``what`` and the errno."""
    if rc < 0:
        err = ctypes.get_errno()
        raise OSError(err, f"{what}: {os.strerror(err)}")
    return rc


def prctl(option: int, arg: int = 0, what: str = "prctl") -> int:
    return check(libc().prctl(option, arg, 0, 0, 0), what)


def unshare(flags: int) -> None:
    check(libc().unshare(flags), f"unshare({flags:#x})")


def mount(source: str | None, target: str, fstype: str | None, flags: int, data: str | None = None) -> None:
    def enc(s: str | None) -> bytes | None:
        return None if s is None else s.encode()

    check(libc().mount(enc(source), target.encode(), enc(fstype), flags, enc(data)), f"mount {target}")


def umount(target: str, flags: int = MNT_DETACH) -> None:
    check(libc().umount2(target.encode(), flags), f"umount {target}")


def pivot_root(new_root: str, put_old: str) -> None:
    nr = _PIVOT_ROOT.get(os.uname().machine)
    if nr is None:
        raise OSError(f"pivot_root: no system call number known for {os.uname().machine}")
    check(int(libc().syscall(nr, new_root.encode(), put_old.encode())), "pivot_root")


_PIVOT_ROOT = {"x86_64": 155, "aarch64": 41, "riscv64": 41, "ppc64le": 203, "s390x": 217}


def clear_capabilities() -> None:
    """Empty the permitted, effective and inheritable capability sets of this process."""
    header = (ctypes.c_uint32 * 2)(0x20080522, 0)  # _LINUX_CAPABILITY_VERSION_3, this process
    check(libc().capset(header, (ctypes.c_uint32 * 6)()), "capset")
