"""The seccomp filter, in both modes: **deny by default**. A system call not on the list below
fails with ``EPERM`` — sockets (the checker's channel is two inherited pipes), new processes
(``fork``, ``vfork``, a ``clone`` that is not a thread of this process, a thread that would start a
namespace), ``ptrace`` and cross-process memory, ``mknod``, mounts, namespaces (``unshare``,
``setns``), ``set*id``, ``chown``, ``setrlimit``, keys, BPF, ``perf_event_open``, ``io_uring``,
``kexec``, ``personality``, ``userfaultfd``, ``memfd_create``, file handles, Landlock and seccomp
themselves, and every call that changes a file's metadata (``chmod``, ``fchmod``, ``fchmodat``,
``fchmodat2``, the ``chown`` family, ``utime``, ``utimes``, ``utimensat``, ``futimesat``, the extended
attribute calls): the kernel's other layers (Landlock) have no right covering them. Memory is never
writable and executable at once, never becomes executable later (``mprotect``), and executable
memory is only a mapping of a file (the loader's libraries): with a folder the program can write
but not map (a ``noexec`` tmpfs; in the fallback, Landlock lets it write but not read back its
files), native code of its own never runs. Signals reach only the program itself; ``ioctl`` serves only a
few terminal queries and close-on-exec; ``prctl`` only thread names; ``prlimit64`` only reads.
In the fallback, whose folder is a host folder, the program writes only files the checker made, each at most
``RLIMIT_FSIZE``, so its disk quota holds by construction: ``create="named"`` (Landlock refuses every named
file, folder and link there) refuses what Landlock does not see: files without a name (``O_TMPFILE``) and
``fallocate`` (which can reserve blocks past a file's end); ``create="none"`` (no Landlock) refuses every
creation: ``open`` and ``openat`` only without ``O_CREAT`` (so even an existing file cannot be opened with
it: ``open(path, "w")``), no ``creat``, ``mkdir``, ``link``, ``symlink``. ``openat2``, whose flags seccomp
cannot see, is never allowed.
``clone3`` answers ``ENOSYS`` (glibc then creates threads with ``clone``, which is checked).
System calls of another architecture kill the process.

libseccomp (``libseccomp.so.2``, a dependency of apt and systemd, so present on practically every
Linux host) resolves the names for this architecture; where it is missing the layer is absent and
:mod:`harness.sandbox.levels` says so.
"""
from __future__ import annotations

import ctypes

from .libc import CLONE_THREAD, NAMESPACE_FLAGS

ALLOWED = (
    # files and descriptors (what a file may be is decided by the mount view and Landlock)
    "read", "write", "readv", "writev", "pread64", "pwrite64", "preadv", "pwritev", "preadv2", "pwritev2",
    "open", "openat", "creat", "close", "close_range", "lseek", "dup", "dup2", "dup3", "fcntl", "flock",
    "stat", "fstat", "lstat", "newfstatat", "statx", "statfs", "fstatfs", "access", "faccessat", "faccessat2",
    "getdents", "getdents64", "getcwd", "chdir", "fchdir", "readlink", "readlinkat", "mkdir", "mkdirat", "rmdir",
    "unlink", "unlinkat", "rename", "renameat", "renameat2", "link", "linkat", "symlink", "symlinkat",
    "umask", "truncate", "ftruncate",
    "fallocate", "fadvise64", "fsync", "fdatasync", "sendfile", "copy_file_range", "splice", "tee",
    "pipe", "pipe2", "select", "pselect6", "poll", "ppoll", "epoll_create", "epoll_create1", "epoll_ctl",
    "epoll_wait", "epoll_pwait", "epoll_pwait2", "eventfd", "eventfd2",
    # memory
    "brk", "munmap", "mremap", "madvise", "msync", "mincore", "membarrier",  # mmap, mprotect: below
    # threads, signals, time
    "futex", "futex_waitv", "set_robust_list", "get_robust_list", "set_tid_address", "rseq", "arch_prctl",
    "sched_yield", "sched_getaffinity", "sched_getparam", "sched_getscheduler", "sched_get_priority_max",
    "sched_get_priority_min", "sched_rr_get_interval", "getcpu",
    "rt_sigaction", "rt_sigprocmask", "rt_sigreturn", "rt_sigpending", "rt_sigsuspend", "rt_sigtimedwait",
    "sigaltstack", "restart_syscall", "pause", "nanosleep", "clock_nanosleep", "clock_gettime", "clock_getres",
    "gettimeofday", "time", "alarm", "getitimer", "setitimer", "timer_create", "timer_settime", "timer_gettime",
    "timer_getoverrun", "timer_delete", "timerfd_create", "timerfd_settime", "timerfd_gettime",
    # who and where it is (reading only)
    "getpid", "getppid", "gettid", "getuid", "geteuid", "getgid", "getegid", "getresuid", "getresgid",
    "getgroups", "getpgrp", "getpgid", "getsid", "capget", "getrlimit", "getrusage", "getpriority", "sysinfo",
    "times", "uname", "getrandom", "wait4", "waitid",
    # the end, and the one exec that starts the program's interpreter (the mount view and Landlock
    # leave nothing else executable)
    "exit", "exit_group", "execve",
)
IOCTLS = (0x5401, 0x5413, 0x541B, 0x5421, 0x5450, 0x5451)  # TCGETS TIOCGWINSZ FIONREAD FIONBIO FIONCLEX FIOCLEX
PRCTLS = (15, 16)  # PR_SET_NAME, PR_GET_NAME

_ALLOW, _KILL_PROCESS = 0x7FFF0000, 0x80000000
_EPERM, _ENOSYS = 0x00050000 | 1, 0x00050000 | 38
_EQ, _MASKED_EQ = 4, 7
PROT_WRITE, PROT_EXEC, MAP_ANONYMOUS = 0x2, 0x4, 0x20
O_CREAT, O_TMPFILE = 0o100, 0o20000000  # O_TMPFILE's own bit (the flag also holds O_DIRECTORY)
CREATING = {"any": (), "named": ("open", "openat", "fallocate"),  # what each ``create`` level does not allow as is
            "none": ("open", "openat", "creat", "mkdir", "mkdirat", "link", "linkat", "symlink", "symlinkat",
                     "fallocate")}
_FLTATR_ACT_BADARCH = 2


class _Cmp(ctypes.Structure):
    _fields_ = [("arg", ctypes.c_uint), ("op", ctypes.c_int), ("a", ctypes.c_uint64), ("b", ctypes.c_uint64)]


_LIBRARY: list[ctypes.CDLL] = []


def library():
    """libseccomp with its prototypes (loaded once per process: the checker loads it before the
    program's process loses sight of it); :class:`OSError` where it is not installed."""
    if _LIBRARY:
        return _LIBRARY[0]
    lib = ctypes.CDLL("libseccomp.so.2", use_errno=True)
    lib.seccomp_init.restype = ctypes.c_void_p
    lib.seccomp_init.argtypes = [ctypes.c_uint32]
    lib.seccomp_syscall_resolve_name.argtypes = [ctypes.c_char_p]
    lib.seccomp_rule_add_array.argtypes = [ctypes.c_void_p, ctypes.c_uint32, ctypes.c_int, ctypes.c_uint,
                                           ctypes.POINTER(_Cmp)]
    lib.seccomp_attr_set.argtypes = [ctypes.c_void_p, ctypes.c_int, ctypes.c_uint32]
    lib.seccomp_load.argtypes = lib.seccomp_release.argtypes = [ctypes.c_void_p]
    _LIBRARY.append(lib)
    return lib


def install(own_pid: int, allow_exec: bool = True, create: str = "any") -> None:
    """Load the filter into this process (inherited by its threads and kept across ``execve``).
    ``own_pid``: the process's pid as it sees itself (1 in a PID namespace), the one signal target;
    ``allow_exec=False`` refuses ``execve`` too (a process that has nothing left to start);
    ``create``: ``any``; ``named`` refuses files without a name and ``fallocate``; ``none`` every creation (the
    fallback's disk quota, with and without Landlock)."""
    lib = library()
    ctx = lib.seccomp_init(_EPERM)
    if not ctx:
        raise OSError("seccomp_init failed")
    try:
        if lib.seccomp_attr_set(ctx, _FLTATR_ACT_BADARCH, _KILL_PROCESS) < 0:
            raise OSError("seccomp: cannot set the action for other architectures")

        def rule(action: int, name: str, *cmps: _Cmp) -> None:
            nr = lib.seccomp_syscall_resolve_name(name.encode())
            if nr < 0:  # not a system call on this architecture
                return
            rc = lib.seccomp_rule_add_array(ctx, action, nr, len(cmps), (_Cmp * len(cmps))(*cmps) if cmps else None)
            if rc < 0:  # libseccomp returns -errno
                raise OSError(-rc, f"seccomp rule {name}")

        for name in ALLOWED:
            if (allow_exec or name != "execve") and name not in CREATING[create]:
                rule(_ALLOW, name)
        if create != "any":  # open and openat that create no unnamed file (none: nothing; flags: argument 1, 2)
            refused = O_TMPFILE | (O_CREAT if create == "none" else 0)
            rule(_ALLOW, "open", _Cmp(1, _MASKED_EQ, refused, 0))
            rule(_ALLOW, "openat", _Cmp(2, _MASKED_EQ, refused, 0))
        # a thread of this process, never a namespace: (flags & (CLONE_THREAD | namespaces)) == CLONE_THREAD
        rule(_ALLOW, "clone", _Cmp(0, _MASKED_EQ, CLONE_THREAD | NAMESPACE_FLAGS, CLONE_THREAD))
        rule(_ENOSYS, "clone3")
        # W^X, and executable memory only from files: mmap without PROT_EXEC, or PROT_EXEC without
        # PROT_WRITE of a file (not MAP_ANONYMOUS); mprotect never adds PROT_EXEC
        rule(_ALLOW, "mmap", _Cmp(2, _MASKED_EQ, PROT_EXEC, 0))
        rule(_ALLOW, "mmap", _Cmp(2, _MASKED_EQ, PROT_EXEC | PROT_WRITE, PROT_EXEC),
             _Cmp(3, _MASKED_EQ, MAP_ANONYMOUS, 0))
        rule(_ALLOW, "mprotect", _Cmp(2, _MASKED_EQ, PROT_EXEC, 0))
        for name in ("kill", "tgkill", "tkill", "rt_sigqueueinfo", "rt_tgsigqueueinfo"):
            rule(_ALLOW, name, _Cmp(0, _EQ, own_pid, 0))
        rule(_ALLOW, "prlimit64", _Cmp(2, _EQ, 0, 0))  # no new limit: reading only
        for request in IOCTLS:
            rule(_ALLOW, "ioctl", _Cmp(1, _MASKED_EQ, 0xFFFFFFFF, request))
        for option in PRCTLS:
            rule(_ALLOW, "prctl", _Cmp(0, _EQ, option, 0))
        rc = lib.seccomp_load(ctx)
        if rc < 0:
            raise OSError(-rc, "seccomp_load")
    finally:
        lib.seccomp_release(ctx)
