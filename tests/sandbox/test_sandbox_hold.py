"""Issue 31: the sandbox holds in every mode. The program's folder is never loadable (native code of
its own never runs: the namespaces mode's tmpfs is ``noexec``; the fallback's host folder is
write-only under Landlock; seccomp keeps memory W^X and executable memory file-backed), its
environment holds only what the checker sets (and cannot be changed to configure a library),
metadata-changing system calls are refused, the fallback never keeps effective uid 0 without an
opt-in, the audit hook's reports leave the program as they happen, and the fallback's disk quota
holds."""
import os
import stat

import pytest

from harness.errors import ConfigError
from harness.sandbox import ABSENT_ENV, PythonLimits, run_python
from harness.sandbox import levels
from test_sandbox import KERNEL_LAYERS, LAYERS, MODES
from test_sandbox_escapes import PRELUDE  # the attempt() prelude the escape tests use

_SECCOMP = pytest.mark.skipif(not levels.seccomp_available(), reason="no libseccomp here")

FAST = PythonLimits(timeout_s=5.0)
ROOT_ENV = "HARNESS_SANDBOX_ROOT"

# native code of its own: a copy of an allowed standard-library extension, written into its folder
# and loaded from there (what a library's environment-driven configuration would make it dlopen); where
# nothing can be created (the fallback), into the one file it can write, its program.py
NATIVE = '''
import _json, importlib.machinery, importlib.util
blob = open(_json.__file__, "rb").read()
try:
    LIB = "lib_json.so"
    f = open(LIB, "wb")
except PermissionError:
    LIB = "program.py"
    f = open(os.open(LIB, os.O_WRONLY | os.O_TRUNC), "wb")
with f:
    f.write(blob)
def load():
    path = os.path.abspath(LIB)
    loader = importlib.machinery.ExtensionFileLoader("_json", path)
    importlib.util.module_from_spec(importlib.util.spec_from_file_location("_json", path, loader=loader))
def map_exec():
    fd = os.open(LIB, os.O_RDONLY)
    mmap.mmap(fd, 4096, prot=mmap.PROT_READ | mmap.PROT_EXEC)
attempt("load native code from its folder", load)
attempt("map its own file executable", map_exec)
attempt("writable and executable memory", lambda: mmap.mmap(-1, 4096, prot=mmap.PROT_READ | mmap.PROT_WRITE | mmap.PROT_EXEC))
attempt("anonymous executable memory", lambda: mmap.mmap(-1, 4096, prot=mmap.PROT_READ | mmap.PROT_EXEC))
attempt("chmod a file outside", lambda: os.chmod(OUT + "/file.txt", 0o4777))
attempt("utime a file outside", lambda: os.utime(OUT + "/file.txt", (0, 0)))
attempt("chmod its own file", lambda: os.chmod(LIB, 0o755))
attempt("utime its own file", lambda: os.utime(LIB, (0, 0)))
attempt("fchmod its own file", lambda: os.fchmod(os.open(LIB, os.O_WRONLY), 0o755))
print("environment", sorted(os.environ))
'''


# the fallback runs here as root (CI): opted in for the module (tests/conftest.py), except where a test checks the
# refusal
pytestmark = pytest.mark.usefixtures("sandbox_root_opt_in")


@pytest.fixture()
def outside(tmp_path):
    folder = tmp_path / "outside"
    folder.mkdir()
    (folder / "file.txt").write_text("precious")
    os.chmod(folder / "file.txt", 0o644)
    os.utime(folder / "file.txt", (1_000_000_000, 1_000_000_000))
    return folder


@pytest.mark.parametrize("guard", [True, False], ids=["hook", "no hook"])
@pytest.mark.parametrize("mode", MODES)
def test_its_folder_is_not_loadable_and_metadata_cannot_change(outside, mode, guard):
    program = (PRELUDE + NATIVE).format(outside=str(outside))
    if guard:
        program += 'attempt("configure a library through the environment", ' \
                   'lambda: os.environ.__setitem__("OPENSSL_CONF", os.path.abspath("evil.cnf")))\n'
    result = run_python(program, FAST, audit_guard=guard, isolation=mode)
    assert result.passed, result.stderr[-2000:]
    lines = result.stdout.splitlines()
    escaped = [line for line in lines if line.startswith("ESCAPED")]
    denied = [line for line in lines if line.startswith("denied")]
    assert escaped == [] and len(denied) == program.count("attempt(") - 1, result.stdout
    assert "environment ['LANG', 'TMPDIR']" in result.stdout
    st = os.stat(outside / "file.txt")
    assert stat.S_IMODE(st.st_mode) == 0o644 and st.st_mtime == 1_000_000_000


@pytest.mark.skipif(not KERNEL_LAYERS, reason="no seccomp + Landlock here: the fallback refuses to run")
def test_the_fallback_refuses_effective_uid_0_unless_opted_in(monkeypatch):
    monkeypatch.delenv(ROOT_ENV)
    if not levels.root_kept():
        assert run_python("pass", FAST, isolation="fallback").passed
        pytest.skip("not root, or the interpreter is reachable by other users: the fallback changes every uid")
    with pytest.raises(ConfigError, match=r"refusing to run generated code with effective uid 0: .* lies in a folder "
                                          r"only root may enter.*set HARNESS_SANDBOX_ROOT=allow"):
        run_python("pass", FAST, isolation="fallback")
    monkeypatch.setenv(ROOT_ENV, "yes")
    with pytest.raises(ConfigError, match="HARNESS_SANDBOX_ROOT='yes'. Valid: refuse, allow"):
        run_python("pass", FAST, isolation="fallback")
    monkeypatch.setenv(ROOT_ENV, "allow")
    assert run_python("pass", FAST, isolation="fallback").passed
    assert any("effective uid stays 0" in gap for gap in levels.cannot_enforce("fallback"))


# the hook's state through the garbage collector: every list among its defaults filled with junk (a list
# of what was reported, used to drop repeats and cap the count, once silenced every later report)
SILENCE = '''
import gc
for f in gc.get_objects():
    if type(f).__name__ == "function" and f.__name__ == "_guard":
        for value in f.__defaults__ or ():
            if type(value) is list:
                value.extend("junk %d" % i for i in range(1000))
'''


@pytest.mark.parametrize("mode", MODES)
def test_reports_leave_the_program_as_they_happen(outside, mode):
    program = SILENCE + f'''
try:
    open({str(outside / "file.txt")!r}).read()
except OSError:
    pass
'''
    result = run_python(program, FAST, isolation=mode)
    assert result.passed, result.stderr[-2000:]
    assert str(outside / "file.txt") in result.files, result


@pytest.mark.parametrize("mode", MODES)
def test_stat_of_host_files_is_reported(outside, mode):
    program = f'''
import os, pathlib
for probe in (lambda: os.stat({str(outside / "file.txt")!r}), lambda: os.path.getmtime("/etc/hostname"),
              lambda: pathlib.Path({str(outside / "other.txt")!r}).exists(), lambda: os.access("/etc/shadow", 0)):
    try:
        probe()
    except OSError:
        pass
'''
    result = run_python(program, FAST, isolation=mode)
    assert result.passed, result.stderr[-2000:]
    assert {str(outside / "file.txt"), "/etc/hostname", str(outside / "other.txt"), "/etc/shadow"} <= set(result.files), \
        result.files


# every way to put bytes on disk from its folder; the kernel's count of accepted bytes is the program's own
FILL = '''
import os
total = 0
def fill(fd, mb=16, offset=0):
    global total
    try:
        os.lseek(fd, offset, 0)
        for _ in range(mb):
            total += os.write(fd, b"x" * (1 << 20))
    except OSError:
        pass
def opened(path, flags):
    try:
        return os.open(path, flags, 0o600)
    except OSError:
        return None
fds = [opened("f%d" % i, os.O_WRONLY | os.O_CREAT) for i in range(12)]
fds += [opened(".", os.O_TMPFILE | os.O_WRONLY) for _ in range(4)]
for name, make in (("d", os.mkdir), ("s", lambda n: os.symlink("program.py", n)), ("h", lambda n: os.link("program.py", n))):
    try:
        make(name)
        fds.append(opened(name + "/x" if name == "d" else name, os.O_WRONLY | os.O_CREAT))
    except OSError:
        pass
own = opened("program.py", os.O_WRONLY | os.O_APPEND)
for fd in [f for f in fds if f is not None] + [own]:
    fill(fd)
if own is not None:
    for grow in (lambda: os.truncate("program.py", 1 << 30), lambda: os.posix_fallocate(own, 0, 1 << 30)):
        try:
            grow()
            total += 1 << 30
        except OSError:
            pass
    fill(opened("program.py", os.O_WRONLY), offset=40 << 20)  # sparse, past the quota
print("wrote", total)
'''


@pytest.mark.parametrize("mode,hook,absent", [*[pytest.param(*p.values, "", marks=p.marks) for p in LAYERS
                                                 if p.values[0] == "fallback"],
                                               pytest.param("weak", False, "landlock", marks=_SECCOMP)])
def test_what_the_program_writes_stays_within_its_disk_quota_by_construction(mode, hook, absent, monkeypatch):
    """Issue 31 class 7: the fallback's quota was polled (99 MB written against 64). Now its folder is a host folder
    where nothing can be created (Landlock, seccomp) and ``program.py`` is limited to the quota (RLIMIT_FSIZE): the
    program runs to its end, never killed, having written at most the quota, whichever way it tries. (The namespaces
    mode's quota is its tmpfs: tests/sandbox/test_sandbox_escapes.py.)"""
    if absent:
        monkeypatch.setenv(ABSENT_ENV, absent)
    quota = 12
    result = run_python(FILL, PythonLimits(timeout_s=30.0, disk_mb=quota, max_file_mb=16), audit_guard=hook,
                        isolation=mode)
    assert result.passed and result.stdout.startswith("wrote"), (result.reason, result.stdout, result.stderr[-2000:])
    assert int(result.stdout.split()[1]) <= quota << 20, result.stdout
