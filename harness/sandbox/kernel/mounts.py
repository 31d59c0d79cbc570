"""The namespaces mode's filesystem: a new root holding only the view (:mod:`harness.sandbox.view`).

In a fresh mount namespace, a small tmpfs is mounted on the run's (empty) folder and becomes the
root (``pivot_root``; the host's tree is detached): into it, read-only bind mounts of the standard
library folders (``site-packages`` covered by an empty read-only tmpfs, denied C extensions by an
empty file), of the interpreter, its loader and shared libraries; ``/dev`` with ``null``, ``zero`` and
``urandom`` only; a new ``/proc`` (this PID namespace's processes only); and, at the run's folder's
own path, a private tmpfs of ``disk_mb`` — the only writable place, which is also the disk quota.
Then the root itself is made read-only. All mounts are ``nosuid``; all but ``/dev``'s are ``nodev``.
"""
from __future__ import annotations

import os

from .libc import MNT_DETACH, MS_BIND, MS_NODEV, MS_NOEXEC, MS_NOSUID, MS_RDONLY, MS_REMOUNT
from .libc import mount, pivot_root, umount

_ST_TO_MS = {2: MS_NOSUID, 4: MS_NODEV, 8: MS_NOEXEC, 1024: 1024, 2048: 2048, 4096: 1 << 21}  # statvfs -> mount


def _kept_flags(path: str) -> int:
    """The source mount's flags that a read-only remount of a bind must keep (locked in a user namespace)."""
    f_flag = os.statvfs(path).f_flag
    return sum(ms for st, ms in _ST_TO_MS.items() if f_flag & st)


def _bind(root: str, source: str, target: str | None = None, device: bool = False) -> None:
    """Bind ``source`` read-only at ``target`` (its own path by default) inside ``root``."""
    inside = root + (target or source)
    if os.path.isdir(source):
        os.makedirs(inside, exist_ok=True)
    else:
        os.makedirs(os.path.dirname(inside), exist_ok=True)
        if not os.path.exists(inside):
            os.close(os.open(inside, os.O_WRONLY | os.O_CREAT, 0o644))
    mount(source, inside, None, MS_BIND)
    flags = MS_REMOUNT | MS_BIND | MS_RDONLY | MS_NOSUID | _kept_flags(source) | (0 if device else MS_NODEV)
    mount(None, inside, None, flags)


def _proc(root: str) -> None:
    """A new procfs showing this PID namespace only (``subset=pid`` hides the kernel's own files
    where the kernel knows it). A kernel or container that refuses it leaves the view without /proc."""
    os.makedirs(root + "/proc", exist_ok=True)
    for options in ("subset=pid,hidepid=invisible", "hidepid=2", None):
        try:
            mount("proc", root + "/proc", "proc", MS_NOSUID | MS_NODEV | MS_NOEXEC, options)
            return
        except OSError:
            continue


def build(view: dict, tmp: str, disk_mb: int, owner: tuple[int, int]) -> None:
    """Make the view this (new, private) mount namespace's root; the working directory becomes ``tmp`` (writable,
    ``disk_mb`` in size, owned by ``owner`` = (uid, gid) as this namespace numbers them)."""
    root = tmp
    mount("tmpfs", root, "tmpfs", MS_NOSUID | MS_NODEV, "size=1m,nr_inodes=4096,mode=0755")
    for folder in view["stdlib_top"]:
        _bind(root, folder)
    for hidden in view["hidden_dirs"]:
        mount("tmpfs", root + hidden, "tmpfs", MS_RDONLY | MS_NOSUID | MS_NODEV | MS_NOEXEC, "size=4k,mode=0555")
    empty = root + "/.empty"
    os.close(os.open(empty, os.O_WRONLY | os.O_CREAT, 0o444))
    for hidden in view["hidden_files"]:
        _bind(root, empty, hidden)  # over the extension file: nothing to load (kept: an unlinked file blocks
        # the read-only remount of the root)
    for path in [view["exe"], *view["libs"], *view["extras"]]:
        _bind(root, path)
    os.makedirs(root + "/dev")
    mount("tmpfs", root + "/dev", "tmpfs", MS_NOSUID | MS_NOEXEC, "size=4k,nr_inodes=16,mode=0755")
    for device in view["devices"]:
        _bind(root, device, device=True)
    mount(None, root + "/dev", None, MS_REMOUNT | MS_RDONLY | MS_NOSUID | MS_NOEXEC, "size=4k,nr_inodes=16,mode=0755")
    _proc(root)
    os.makedirs(root + tmp)
    mount("tmpfs", root + tmp, "tmpfs", MS_NOSUID | MS_NODEV | MS_NOEXEC,
          f"size={disk_mb}m,nr_inodes=4096,mode=0700,uid={owner[0]},gid={owner[1]}")
    os.chdir(root)
    pivot_root(".", ".")  # the old root now lies under the new one, at the same place: detach it
    umount(".", MNT_DETACH)
    os.chdir("/")
    mount(None, "/", None, MS_REMOUNT | MS_RDONLY | MS_NOSUID | MS_NODEV, "size=1m,nr_inodes=4096,mode=0755")
    os.chdir(tmp)

