"""The audit hook (PEP 578) in the program's interpreter: the *second* layer. The wall is the kernel
(:mod:`harness.sandbox.kernel`): a mount view or Landlock, seccomp, an unprivileged uid, limits —
it holds whatever Python runs, including native code. This hook catches Python-level attempts
early, with a readable reason, and reports files the program had no reason to open:

- refused: sockets, new processes, signals, ctypes/cffi, sub-interpreters and the other
  :data:`~harness.sandbox.view.DENIED_MODULES` — by *any* part of the dotted name and, for a C
  extension, by its file (only the standard library's extension folder, only allowed files, and
  only under the file's own module name: a denied extension cannot be loaded under an alias),
  crafted code objects and bytecode, ``/proc/<other pid>``, terminals and devices, directories
  outside its folder (no ``dir_fd`` escapes), and writes, renames, links, deletions and mode
  changes outside its folder (``dir_fd`` resolved; no symbolic links at all);
- reported on the reply channel as each happens: ``["file", hex(path)]`` for every file or folder it
  opens, lists or stats (``os.stat``, ``os.lstat``, ``os.access`` and what calls them: ``os.path.exists``,
  ``pathlib``) outside its folder, the standard library and the three devices — a completion looking
  for an answer key, say — reported *before* the kernel refuses it, so attempts count; ``["denied",
  hex(what)]`` for each refusal above. Nothing is kept in the program's memory (a list of what was
  reported could be found through the garbage collector and filled, silencing later reports): the
  checker drops repeats and keeps the first few of each kind.

Standard library only, and run from its source in the program's interpreter. The hook is this
module's ``_guard`` code bound to its settings as default arguments (see :func:`install`), so that
it calls nothing the program could replace.
"""
from __future__ import annotations

# audit event -> (positions of path arguments, position of the dir_fd for each, or None)
PATH_EVENTS = {
    "os.rename": ((0, 1), (2, 3)), "os.link": ((0, 1), (2, 3)), "os.remove": ((0,), (1,)),
    "os.rmdir": ((0,), (1,)), "os.mkdir": ((0,), (2,)), "os.truncate": ((0,), (None,)),
    "shutil.copyfile": ((1,), (None,)), "shutil.copytree": ((1,), (None,)), "shutil.rmtree": ((0,), (1,)),
    "shutil.move": ((0, 1), (None, None)), "shutil.make_archive": ((0,), (None,)),
    "shutil.unpack_archive": ((1,), (None,)),
}
DENIED_EVENTS = frozenset({
    "os.symlink", "code.__new__", "marshal.load", "sqlite3.connect", "sqlite3.enable_load_extension",
    "sqlite3.load_extension", "fcntl.ioctl", "os.forkpty", "os.system", "os.startfile", "os.kill", "os.killpg",
    "signal.pthread_kill", "resource.setrlimit", "resource.prlimit", "sys.remote_exec", "webbrowser.open",
    "os.putenv", "os.unsetenv", "os.chmod", "os.chown", "os.utime", "os.setxattr", "os.removexattr", "os.chflags",
    "os.lchflags", "shutil.chown", "shutil.copymode", "shutil.copystat"})  # environment-driven library
# configuration; metadata changes (which seccomp refuses anyway)
DENIED_PREFIXES = ("socket.", "subprocess.", "os.exec", "os.spawn", "os.posix_spawn", "os.fork", "pty.", "ctypes.",
                   "syslog.", "_posixsubprocess.", "winreg.", "msvcrt.")
LISTING_EVENTS = ("os.listdir", "os.scandir", "sandbox.stat")  # sandbox.stat: raised by the stat wrappers below
STAT_FUNCTIONS = ("stat", "lstat", "access")  # no audit event of their own (Python 3.11)


def _guard(event, args, _tmp="", _pid=0, _dynload=(), _extensions=frozenset(), _denied_modules=frozenset(),
           _readable=(), _hidden=(), _dev_ok=frozenset(), _path_events=(), _denied_prefixes=(),
           _denied_events=frozenset(),
           _listing=(), _report_fd=-1, _last_pyc=None, _writing_flags=0,
           _dir_flags=0, _type=None, _isinstance=None, _str=None, _bytes=None, _int=None, _bool=None,
           _memoryview=None, _len=None, _range=None, _sjoin=None, _bjoin=None, _to_int=None, _lstat=None,
           _stat=None, _readlink=None, _osopen=None, _osread=None, _oswrite=None, _osclose=None, _islink=None,
           _isdir=None, _perm=None, _imp_error=None, _oserror=None, _function=None, _code=None):
    # long because an audit hook must call nothing the program could replace: every helper lives
    # here, and every name is a default bound by install() (an immutable tuple of immutable values
    # but _last_pyc, checked again where used). Replacing this function's
    # __defaults__ or __code__ is refused below. Methods are only called on exact str/bytes/int
    # values, whose types cannot be patched.

    def text(path):  # str, bytes or int (a file descriptor); anything else could change under us
        t = _type(path)
        if t is not _str and t is not _bytes and t is not _int and t is not _bool:
            if _isinstance(path, _str):  # a subclass: its characters, not its methods (fails closed)
                path = _sjoin("", [path])
            elif _isinstance(path, _bytes):
                path = _bjoin(b"", [path])
            elif _isinstance(path, _int):
                return _to_int(path)
            else:
                raise _perm("sandbox: pass paths as str or bytes, not " + t.__name__)
        if _type(path) is _bytes:
            path = path.decode("utf-8", "surrogateescape")
        return path

    def norm(path, base=_tmp):  # absolute, without . and .. (lexical)
        if not path.startswith("/"):
            path = base + "/" + path
        parts = []
        for part in path.split("/"):
            if part == "..":
                if parts:
                    parts.pop()
            elif part and part != ".":
                parts.append(part)
        return "/" + "/".join(parts)

    def resolve(path):  # ``norm`` with symbolic links followed (as the kernel will)
        todo = [p for p in path.split("/") if p][::-1]
        done, hops = "", 0
        while todo:
            part = todo.pop()
            if part == ".":
                continue
            if part == "..":
                done = done.rsplit("/", 1)[0]
                continue
            here = done + "/" + part
            try:
                st = _lstat(here)
            except _oserror:
                done = here
                continue
            if _islink(st.st_mode):
                hops += 1
                if hops > 40:
                    raise _perm("sandbox: too many symbolic links")
                target = _readlink(here)
                if target.startswith("/"):
                    done = ""
                todo.extend([p for p in target.split("/") if p][::-1])
            else:
                done = here
        return done or "/"

    def fd_path(fd):
        try:
            return _readlink("/proc/self/fd/" + _str(fd))
        except _oserror:
            raise _perm("sandbox: unknown file descriptor") from None

    def within(path, folder=_tmp):
        return path == folder or path.startswith(folder + "/")

    def inside(path, dir_fd=None):  # the path (relative to dir_fd if one is given) is in the folder
        path = text(path)
        if _type(path) is _int:
            return within(fd_path(path))
        base = _tmp if dir_fd is None or dir_fd == -1 or dir_fd == -100 else fd_path(text(dir_fd))
        lexical = norm(path, base)
        return within(base) and within(lexical) and within(resolve(lexical))

    def tell(kind, what):  # to the checker at once (it drops repeats): kind b"file" or b"denied"
        try:
            _oswrite(_report_fd, _bjoin(b"", [b'["', kind, b'","',
                                              what.encode("utf-8", "surrogateescape").hex().encode(),
                                               b'"]\n']))
        except _oserror:
            pass

    def needless(lexical):  # a standard-library path (root-owned: no links to plant): nothing to report
        for folder in _readable:
            if within(lexical, folder):
                for hidden in _hidden:
                    if within(lexical, hidden):
                        return False
                return True
        return False

    def report(real):  # a file it had no reason to open
        if within(real) or real in _dev_ok:
            return
        needed = False
        for folder in _readable:
            needed = needed or within(real, folder)
        for folder in _hidden:
            needed = needed and not within(real, folder)
        if not needed:
            tell(b"file", real)

    def deny(what, error=_perm):
        tell(b"denied", what)
        raise error("sandbox: " + what + " is not allowed")

    if event == "open":
        path, mode, flags = args
        path = text(path)
        mode = None if mode is None else text(mode)
        if _type(path) is _int:
            return
        if flags is None or flags == -1:
            flags = 0
        writing = ((mode is not None and ("w" in mode or "a" in mode or "x" in mode or "+" in mode))
                   or (flags & _writing_flags) != 0)
        lexical = norm(path)
        real = resolve(lexical)
        report(real)
        if writing:
            if real == "/dev/null":
                return
            if not (within(lexical) and within(real)):
                deny("writing outside the temporary directory")
            return
        if real.startswith("/proc/"):
            who = real.split("/")[2]
            if who.isdigit() and who != _str(_pid):
                deny("reading another process's /proc entry")
        if real.startswith("/dev/") and real not in _dev_ok:
            deny("opening " + real)
        if not within(real):
            is_dir = (flags & _dir_flags) != 0
            if not is_dir:
                try:
                    is_dir = _isdir(_stat(real).st_mode)
                except _oserror:
                    pass
            if is_dir:
                deny("opening a directory outside the temporary directory")
        if real.endswith(".pyc"):
            _last_pyc[0] = real
        return
    if event in _listing:
        where = args[0] if _len(args) else None
        if where is not None and _type(text(where)) is not _int:
            lexical = norm(text(where))
            if not needless(lexical):
                report(resolve(lexical))
        return
    for name, paths, dir_fds in _path_events:
        if name != event:
            continue
        for i in _range(_len(paths)):
            p = paths[i]
            if p < _len(args) and args[p] is not None:
                d = dir_fds[i]
                if not inside(args[p], args[d] if d is not None and d < _len(args) else None):
                    deny(event + " outside the temporary directory")
        return
    if event == "os.chdir":
        target = text(args[0])
        target = fd_path(target) if _type(target) is _int else resolve(norm(target))
        if target != _tmp:
            deny("changing directory")
        return
    if event == "import":
        name = text(args[0])
        if name in _denied_modules:
            deny("import of " + name, _imp_error)
        parts = name.split(".")
        for part in parts:
            if part in _denied_modules:
                deny("import of " + name, _imp_error)
        if _len(args) > 1 and args[1] is not None:  # a C extension being loaded from this file
            folder, _, file = resolve(norm(text(args[1]))).rpartition("/")
            stem = file.split(".")[0]
            if folder not in _dynload or stem not in _extensions or stem != parts[-1]:
                deny("C extension " + name + " from " + folder + "/" + file, _imp_error)
        return
    if event == "object.__setattr__" or event == "object.__delattr__":  # "= None" is a deletion
        if (_len(args) > 1 and args[1] in ("__code__", "__defaults__", "__kwdefaults__")
                and _type(args[0]) is _function and args[0].__code__ is _code):
            deny("replacing the audit hook's code or defaults")
        return
    if event == "marshal.loads":
        data = args[0]
        t = _type(data)
        if not (t is _bytes or (t is _memoryview and _type(data.obj) is _bytes)):
            deny("marshal.loads of mutable data")
        pyc = _last_pyc[0]  # the program may have changed it: checked again here
        ok = _type(pyc) is _str and pyc.endswith(".pyc") and not within(pyc)
        if ok:
            fd = _osopen(pyc, 0)
            try:
                chunks = []
                while True:
                    chunk = _osread(fd, 1 << 20)
                    if not chunk:
                        break
                    chunks.append(chunk)
            finally:
                _osclose(fd)
            ok = _bjoin(b"", chunks)[16:] == _bytes(data)
        if not ok:
            deny("loading bytecode that is not an installed module's")
        return
    if event in _denied_events or event.startswith(_denied_prefixes):
        deny(event)


def _report_stat(os, audit) -> None:
    """``os.stat``, ``os.lstat``, ``os.access`` (and ``posix``'s, which the import system calls) raise
    ``sandbox.stat`` first, so that the hook reports host files probed for their size or times (the
    fallback has no mount view to hide them). A second layer like the hook: the originals stay reachable."""
    import posix

    fspath = os.fspath

    def reported(function):
        def call(path, *args, **kwargs):
            path = fspath(path) if not isinstance(path, int) else path  # converted once: reported = used
            audit("sandbox.stat", path)
            return function(path, *args, **kwargs)
        call.__name__ = call.__qualname__ = function.__name__
        return call

    for name in STAT_FUNCTIONS:
        if hasattr(posix, name):
            wrapper = reported(getattr(posix, name))
            setattr(posix, name, wrapper)
            setattr(os, name, wrapper)


def install(tmp: str, readable: list[str], hidden: list[str], extension_dirs: list[str], extensions: list[str],
            denied_modules: frozenset, report_fd: int) -> None:
    """Add the hook for this interpreter: ``tmp`` is the program's folder (its working directory),
    ``readable`` the folders it reads for imports but ``hidden`` (``site-packages``), ``extensions``
    the stems of the C extensions it may load from ``extension_dirs``; reports go to ``report_fd``."""
    import os
    import stat
    import sys
    import types

    settings = {
        "_tmp": tmp, "_pid": os.getpid(), "_dynload": tuple(extension_dirs), "_extensions": frozenset(extensions),
        "_denied_modules": frozenset(denied_modules), "_readable": tuple(readable),
        "_hidden": tuple(hidden),
        "_dev_ok": frozenset({"/dev/null", "/dev/zero", "/dev/urandom"}),
        "_path_events": tuple((event, *where) for event, where in PATH_EVENTS.items()),
        "_denied_prefixes": DENIED_PREFIXES, "_denied_events": DENIED_EVENTS, "_listing": LISTING_EVENTS,
        "_report_fd": report_fd, "_last_pyc": [None],
        "_writing_flags": os.O_WRONLY | os.O_RDWR | os.O_CREAT | os.O_TRUNC | os.O_APPEND,
        "_dir_flags": os.O_DIRECTORY | getattr(os, "O_PATH", 0),
        "_type": type, "_isinstance": isinstance, "_str": str, "_bytes": bytes, "_int": int, "_bool": bool,
        "_memoryview": memoryview, "_len": len, "_range": range, "_sjoin": str.join, "_bjoin": bytes.join,
        "_to_int": int.__index__, "_lstat": os.lstat, "_stat": os.stat, "_readlink": os.readlink,
        "_osopen": os.open, "_osread": os.read, "_oswrite": os.write, "_osclose": os.close,
        "_islink": stat.S_ISLNK, "_isdir": stat.S_ISDIR, "_perm": PermissionError, "_imp_error": ImportError,
        "_oserror": OSError, "_function": types.FunctionType, "_code": _guard.__code__}
    _report_stat(os, sys.audit)
    code = _guard.__code__
    names = code.co_varnames[2:code.co_argcount]
    hook = types.FunctionType(code, {"__builtins__": {}}, "_guard", tuple(settings[n] for n in names))
    sys.addaudithook(hook)
