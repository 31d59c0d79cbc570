"""Isolation levels: what this host can enforce, what it cannot, and who must opt in to less.

- ``namespaces``: namespaces + mount view + private tmpfs (the disk quota) + an unprivileged uid +
  seccomp (+ Landlock where the kernel has it) + limits + the audit hook. Needs ``unshare`` to work
  (root, or unprivileged user namespaces) and libseccomp.
- ``fallback``: no namespaces (many clusters refuse ``unshare``): seccomp + Landlock + an
  unprivileged uid + limits + the audit hook. Needs both kernel layers.
- ``weak``: the fallback without seccomp or without Landlock: what remains is the audit hook, which
  native code gets past, and limits.

Generated code runs at ``namespaces`` unless the user opts in to less: ``HARNESS_SANDBOX=fallback``
(or ``weak``), an explicit ``isolation=`` argument, or a task's ``min_isolation``. Refusals and
every run's record say plainly what the level in force cannot enforce (:func:`cannot_enforce`).
``HARNESS_SANDBOX_ABSENT=namespaces,seccomp,landlock`` simulates a host without those (tests,
or to see the refusals).

Run as root with the interpreter in a folder only root may enter (``/root/.pyenv``), the fallback
could change only the program's *real* uid (no mount view moves the interpreter): its effective
uid would stay 0. It refuses that, naming why, unless ``HARNESS_SANDBOX_ROOT=allow`` opts in.
"""
from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

from . import view as _view
from .kernel import landlock, rlimits, seccomp, uid

ISOLATIONS = ("weak", "fallback", "namespaces")  # weakest first
FORCE_ENV = "HARNESS_SANDBOX"  # auto (default) | fallback | weak
ABSENT_ENV = "HARNESS_SANDBOX_ABSENT"  # comma-separated: namespaces, seccomp, landlock
ROOT_ENV = "HARNESS_SANDBOX_ROOT"  # refuse (default) | allow: the fallback may keep effective uid 0
_FORCES = ("auto", "fallback", "weak")
_FEATURES = ("namespaces", "seccomp", "landlock")
_PROBES: dict[str, bool | int] = {}  # what the kernel offers, probed once per process
PACKAGE_PARENT = str(Path(__file__).resolve().parents[2])  # the folder holding the ``harness`` package


def _absent() -> set[str]:
    absent = {f.strip() for f in os.environ.get(ABSENT_ENV, "").split(",") if f.strip()}
    if absent - set(_FEATURES):
        from harness.errors import ConfigError

        raise ConfigError(f"environment variable {ABSENT_ENV}={os.environ[ABSENT_ENV]!r}. "
                          f"Valid: a comma-separated list of {', '.join(_FEATURES)}")
    return absent


def namespaces_available() -> bool:
    """Whether the checker can build the namespaces here (probed once per process)."""
    if "namespaces" not in _PROBES:
        code = (f"import sys; sys.path.insert(0, {PACKAGE_PARENT!r}); "
                "from harness.sandbox.kernel.namespaces import probe; probe()")
        try:
            done = subprocess.run([sys.executable, "-I", "-S", "-B", "-c", code], capture_output=True, timeout=60)
            _PROBES["namespaces"] = done.returncode == 0
        except (OSError, subprocess.TimeoutExpired):
            _PROBES["namespaces"] = False
    return bool(_PROBES["namespaces"]) and "namespaces" not in _absent()


def seccomp_available() -> bool:
    """Whether libseccomp can be loaded (the kernel side is near-universal)."""
    if "seccomp" not in _PROBES:
        try:
            seccomp.library()
            _PROBES["seccomp"] = True
        except OSError:
            _PROBES["seccomp"] = False
    return bool(_PROBES["seccomp"]) and "seccomp" not in _absent()


def landlock_abi() -> int:
    """The kernel's Landlock ABI version, 0 where it has none."""
    if "landlock" not in _PROBES:
        _PROBES["landlock"] = landlock.abi()
    return 0 if "landlock" in _absent() else int(_PROBES["landlock"])


def forced() -> str:
    value = os.environ.get(FORCE_ENV, "auto") or "auto"
    if value not in _FORCES:
        from harness.errors import ConfigError

        raise ConfigError(f"environment variable {FORCE_ENV}={value!r}. Valid: {', '.join(_FORCES)}")
    return value


def isolation_in_force() -> str:
    """The strongest level this host gives (``namespaces`` | ``fallback`` | ``weak``), or the fallback's
    level where ``HARNESS_SANDBOX`` asks for the fallback."""
    if forced() == "auto" and namespaces_available() and seccomp_available():
        return "namespaces"
    return "fallback" if seccomp_available() and landlock_abi() else "weak"


def _why(level: str) -> str:
    if forced() != "auto":
        return f"{FORCE_ENV}={forced()} is set"
    missing = [name for name, ok in (("namespaces", namespaces_available()), ("seccomp", seccomp_available()),
                                     ("landlock", bool(landlock_abi()))) if not ok]
    explain = {"namespaces": "unshare cannot create namespaces here", "seccomp": "libseccomp is not installed",
               "landlock": "the kernel has no Landlock"}
    return "; ".join(explain[m] for m in missing) or f"'{level}' was asked for"


def cannot_enforce(level: str) -> list[str]:
    """What a run at ``level`` cannot enforce on this host, in plain words (empty at ``namespaces``)."""
    if level == "namespaces":
        return []
    gaps = ["no mount view: Landlock (where present) limits which files it opens instead, but not what it learns "
            "with stat (any host file's size, owner and times, where its uid may search the folders; the audit "
            "hook reports Python-level stat calls)",
            "no network namespace: seccomp (where present) refuses sockets instead",
            "no PID namespace: the checker kills whatever the program leaves behind"]
    if not (seccomp_available() or landlock_abi()):
        gaps.append("no total disk quota: its folder is a host folder where it can create files; each file is "
                    "limited, and the checker kills the program when the folder passes the quota (polled)")
    elif not seccomp_available():
        gaps.append("disk quota: files it creates without a name (O_TMPFILE) are not counted (each within the "
                    "file-size limit, at most max_open_files of them at once): seccomp refuses them")
    if not seccomp_available():
        gaps.append("no seccomp: native code (a C-extension bug) can make any system call: fork, sockets, "
                    "ptrace, mknod, mount, chmod, utime")
    if not landlock_abi():
        gaps.append("no Landlock: the program can read every file its uid can read (datasets, answer keys, "
                    "results, the harness) and load native code it writes into its folder — only the audit "
                    "hook, which native code gets past, stands in the way")
    if root_kept():
        gaps.append("its effective uid stays 0 (the interpreter is in a root-only folder), without capabilities: "
                    "what the layers above leave open, it may do to files root owns")
    return gaps


def root_kept() -> bool:
    """Whether a run below ``namespaces`` would keep effective uid 0 (root, interpreter out of reach)."""
    return os.geteuid() == 0 and not _reachable()


def _refuse_root(level: str) -> None:
    """A :class:`~harness.errors.ConfigError` where ``level`` would run generated code as effective
    uid 0 and ``HARNESS_SANDBOX_ROOT=allow`` does not opt in."""
    from harness.errors import ConfigError

    value = os.environ.get(ROOT_ENV, "refuse") or "refuse"
    if value not in ("refuse", "allow"):
        raise ConfigError(f"environment variable {ROOT_ENV}={value!r}. Valid: refuse, allow")
    if level != "namespaces" and value != "allow" and root_kept():
        raise ConfigError(
            f"refusing to run generated code with effective uid 0: without namespaces ('{level}' isolation) the "
            f"program can change only its real uid, as the interpreter {_view.compute()['exe']} lies in a folder "
            "only root may enter. Run the harness as another user, or install Python where every user can read "
            f"it (/usr/local, /opt); to run it anyway as effective uid 0 without capabilities, set {ROOT_ENV}=allow.")


def _reachable() -> bool:
    """Whether an unprivileged uid can reach the interpreter and its files (probed once)."""
    if "reachable" not in _PROBES:
        _PROBES["reachable"] = _view.world_reachable(_view.compute())
    return bool(_PROBES["reachable"])


def isolation_layers(level: str, audit_guard: bool = True) -> tuple[str, ...]:
    """The layers a run at ``level`` gets on this machine (all apply, or the run fails)."""
    abi = landlock_abi()
    kernel = (("seccomp",) if seccomp_available() else ()) + ((f"landlock v{abi}",) if abi else ())
    root, namespaces = os.geteuid() == 0, level == "namespaces"
    who = uid.describe(root, root and not namespaces and not _reachable(), user_namespace=namespaces and not root)
    common = (who, "no capabilities", "no_new_privs", "rlimits", "scrubbed env", "new session")
    if level == "namespaces":
        return (("namespaces", "mount view", "private tmpfs quota") + kernel + common
                + (("audit hook",) if audit_guard else ()))
    quota = "disk quota (no new files, file size)" if kernel else "disk quota (polled)"
    return kernel + common + (quota,) + (("audit hook",) if audit_guard else ())


def require_isolation(minimum: str, setting: str = "dataset.min_isolation") -> str:
    """The level in force, or a :class:`~harness.errors.ConfigError` naming ``setting`` when it is
    weaker than ``minimum`` (the user lowers the minimum to opt in to weaker isolation)."""
    from harness.errors import ConfigError

    if minimum not in ISOLATIONS:
        raise ConfigError(f"{setting}={minimum!r}. Valid: {', '.join(reversed(ISOLATIONS))}")
    level = isolation_in_force()
    if ISOLATIONS.index(level) < ISOLATIONS.index(minimum):
        raise ConfigError(
            f"{setting}={minimum!r} but only '{level}' isolation is available ({_why(level)}). It cannot enforce: "
            f"{'; '.join(cannot_enforce(level))}. To run generated code anyway, set {setting}={level}.")
    _refuse_root(level)
    return level


def resolve(isolation: str | None) -> str:
    """The level a run asked for ``isolation`` gets, or a ``ConfigError`` where that would be weaker
    than ``namespaces`` without an opt-in. ``None``: :func:`isolation_in_force`, accepted below
    ``namespaces`` only when ``HARNESS_SANDBOX`` asks for it; ``"fallback"``, ``"weak"``: explicit opt-ins
    to the fallback mode (``weak`` accepts it without seccomp or Landlock)."""
    from harness.errors import ConfigError

    if isolation is not None and isolation not in ISOLATIONS:
        raise ValueError(f"isolation={isolation!r}. Valid: {', '.join(reversed(ISOLATIONS))}")
    if isolation == "namespaces" and not (namespaces_available() and seccomp_available()):
        raise ConfigError(f"isolation 'namespaces' requested but not available here ({_why('namespaces')})")
    fallback = "fallback" if seccomp_available() and landlock_abi() else "weak"
    level = isolation_in_force() if isolation is None else isolation if isolation == "namespaces" else fallback
    accepted = {None: {"auto": ("namespaces",), "fallback": ("namespaces", "fallback"), "weak": ISOLATIONS}[forced()],
                "fallback": ("fallback",)}.get(isolation, ISOLATIONS)
    if level not in accepted:
        opt_in = (f"{FORCE_ENV}=weak or isolation='weak'" if level == "weak"
                  else f"{FORCE_ENV}=fallback or isolation='fallback' (a task: dataset.min_isolation=fallback)")
        raise ConfigError(f"refusing to run generated code: only '{level}' isolation is available ({_why(level)}). "
                          f"It cannot enforce: {'; '.join(cannot_enforce(level))}. To run it anyway, set {opt_in}.")
    _refuse_root(level)
    return level


def plan(level: str, tmp: str, limits) -> dict:
    """What :func:`harness.sandbox.kernel.confine` applies for one run at ``level`` (plain data)."""
    v = _view.compute()
    mode = "namespaces" if level == "namespaces" else "fallback"
    root = os.geteuid() == 0
    abi = landlock_abi()
    # the fallback's folder holds only program.py (nothing can be created there): its size limit is the quota
    file_mb = limits.max_file_mb if mode == "namespaces" else min(limits.max_file_mb, limits.disk_mb)
    return {"mode": mode, "tmp": tmp, "disk_mb": limits.disk_mb, "view": v,
            "identity": {"root": root, "real_only": mode == "fallback" and not _reachable()},
            "rlimits": rlimits.limits(limits.timeout_s, limits.memory_mb, file_mb, limits.max_open_files,
                                      limits.max_processes, own_uid=root),
            "landlock": abi,
            "landlock_rules": _view.landlock_rules(v, tmp, mount_view=mode == "namespaces") if abi else [],
            "seccomp": seccomp_available()}
