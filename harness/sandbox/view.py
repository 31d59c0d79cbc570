"""What the program may see of the filesystem: the interpreter, its standard library (without
``site-packages`` and without the C extensions below), the shared libraries those load, three
devices (``/dev/null``, ``/dev/zero``, ``/dev/urandom``) and its own temporary folder. Nothing else:
no dataset, answer key, results folder, project checkout, the harness's own code, ``/home``,
``/root``, ``/run``, ``/tmp`` or ``/work``. The namespaces mode builds exactly this as a mount view
(:mod:`harness.sandbox.kernel.mounts`); the fallback allows exactly this with Landlock.

Computed once per harness process (it runs the interpreter and ``ldd`` once), then sent to the
checker with every job.
"""
from __future__ import annotations

import os
import stat
import subprocess
import sys

# C extensions (and their builtin namesakes) the program never gets, by file and by name: each
# reaches native memory, starts processes, or runs code without the audit hook (sub-interpreters)
DENIED_MODULES = frozenset({
    "ctypes", "_ctypes", "_ctypes_test", "cffi", "_cffi_backend", "_posixsubprocess", "_xxsubinterpreters",
    "_xxinterpchannels", "_interpreters", "_interpchannels", "_interpqueues", "concurrent.interpreters",
    "_testcapi", "_testinternalcapi", "_testbuffer", "_testimportmultiple", "_testmultiphase", "_testsinglephase",
    "_testclinic", "_testlimitedcapi", "_testexternalinspection", "_remote_debugging", "_xxtestfuzz", "_dbm",
    "_gdbm", "_posixshmem", "_multiprocessing", "readline", "_ssl", "_tkinter"})
DEVICES = ("/dev/null", "/dev/zero", "/dev/urandom")
_EXTRAS = ("/etc/ld.so.cache", "/usr/lib/locale/C.utf8")  # where the loader finds libraries; the UTF-8 locale
_HIDDEN_DIRS = ("site-packages", "dist-packages")

_CACHE: dict[str, dict] = {}


def interpreter_path() -> str:
    """The real interpreter binary (not a virtual environment's link to it)."""
    return os.path.realpath(getattr(sys, "_base_executable", None) or sys.executable)


def _stdlib_dirs(exe: str) -> list[str]:
    out = subprocess.run([exe, "-I", "-S", "-c", "import sys; print('\\n'.join(sys.path))"],
                         capture_output=True, text=True, check=True, timeout=60).stdout
    return [os.path.realpath(p) for p in out.splitlines() if p and os.path.isdir(p)]


def _extension_files(stdlib: list[str]) -> tuple[list[str], list[str]]:
    """(allowed, hidden) C extension files in the standard library's folders: allowed only when the
    file is a standard-library module (``sys.stdlib_module_names``) that is not denied."""
    allowed: list[str] = []
    hidden: list[str] = []
    for folder in stdlib:
        for entry in sorted(os.listdir(folder)):
            if not entry.endswith(".so"):
                continue
            stem = entry.split(".", 1)[0]
            ok = stem in sys.stdlib_module_names and stem not in DENIED_MODULES
            (allowed if ok else hidden).append(os.path.join(folder, entry))
    return allowed, hidden


def _shared_libraries(files: list[str]) -> list[str]:
    """Every shared library (and the loader) ``files`` load, as the loader names them (``ldd``)."""
    out = subprocess.run(["ldd", *files], capture_output=True, text=True, timeout=120).stdout
    found = set()
    for line in out.splitlines():
        line = line.strip()
        path = line.split("=>", 1)[1].strip() if "=>" in line else line
        path = path.split(" (0x", 1)[0].strip()
        if path.startswith("/") and os.path.exists(path):
            found.add(path)
    if not found:
        raise OSError("ldd found no shared libraries for the interpreter")
    return sorted(found)


def compute() -> dict:
    """The view (cached per process): plain data, sent to the checker as part of each job."""
    if "view" not in _CACHE:
        exe = interpreter_path()
        stdlib = _stdlib_dirs(exe)
        allowed, hidden = _extension_files(stdlib)
        _CACHE["view"] = {
            "exe": exe, "stdlib": stdlib, "stdlib_top": top_folders(stdlib), "extensions": allowed,
            "hidden_files": hidden,
            "hidden_dirs": [os.path.join(d, h) for d in stdlib for h in _HIDDEN_DIRS
                            if os.path.isdir(os.path.join(d, h))],
            "libs": [p for p in _shared_libraries([exe, *allowed]) if p != exe],
            "extras": [p for p in _EXTRAS if os.path.exists(p)], "devices": list(DEVICES)}
    return _CACHE["view"]


def top_folders(paths: list[str]) -> list[str]:
    """``paths`` without those inside another of them."""
    kept: list[str] = []
    for p in sorted(set(paths)):
        if not any(p == k or p.startswith(k + "/") for k in kept):
            kept.append(p)
    return kept


def world_reachable(view: dict) -> bool:
    """Whether a uid with no rights of its own can reach every file of the view (each folder on
    the way searchable by others; the fallback has no mount view to move them)."""
    def ok(path: str) -> bool:
        parts = path.split("/")
        for i in range(2, len(parts)):
            if not os.stat("/".join(parts[:i])).st_mode & stat.S_IXOTH:
                return False
        return bool(os.stat(path).st_mode & stat.S_IROTH)

    return all(ok(p) for p in [view["exe"], *view["stdlib"], *view["libs"]])


def landlock_rules(view: dict, tmp: str, mount_view: bool) -> list[tuple[str, str]]:
    """Landlock rules (see :mod:`harness.sandbox.kernel.landlock`). With a mount view (namespaces)
    everything visible may be read; without (fallback) the view is spelt out file by file, and the
    program's folder (a host folder, not ``noexec``) is write-only, and nothing can be created in it: nothing it
    writes can be mapped, and it writes only the files the checker made there (the disk quota)."""
    loader_and_exe = [(view["exe"], "exec")] + [(p, "exec") for p in view["libs"] if "/ld-linux" in p or "/ld-" in p]
    common = [*loader_and_exe, ("/dev/null", "device"), (tmp, "write" if mount_view else "write-existing")]
    if mount_view:
        return [("/", "read"), *common]
    rules = [("/proc/self", "read"), *[(d, "read") for d in DEVICES[1:]], *[(p, "read") for p in view["libs"]],
             *[(p, "read") for p in view["extras"]], *[(p, "read") for p in view["extensions"]]]
    hidden = set(view["hidden_dirs"]) | set(view["hidden_files"])
    for folder in view["stdlib"]:
        rules.append((folder, "list"))
        for entry in sorted(os.listdir(folder)):
            path = os.path.join(folder, entry)
            if path not in hidden and path not in view["stdlib"] and not entry.endswith(".so"):
                rules.append((path, "read"))
    return rules + common
