"""The sandboxed side: what runs in the program's interpreter, which the kernel layers confined
before it started (``python -I -S -B -c <this file's source> <spec>``: the harness's files are not
readable in the sandbox, so this file, :mod:`.wire` and :mod:`.guard` arrive as source).

It reads the program's source from the checker (first line of the request pipe), writes it to
``program.py`` in its folder (for tracebacks), removes the few ``os`` functions that raise no audit
event, adds the audit hook, and runs the program as ``__main__``. In check mode it then answers
the checker's calls of the entry point, one JSON line per call, with plain-data results. Standard
library only.
"""
import json
import os
import sys

SETUP_FAILED = 3


def _module(name: str, source: str):
    import types

    module = types.ModuleType("_sandbox_" + name)
    exec(compile(source, f"<sandbox {name}>", "exec"), module.__dict__)
    return module


def _remove_unaudited() -> None:
    """Remove the functions that change files or reach other processes without raising an audit
    event. For the hook's sake only: seccomp refuses ``mknod`` and pidfds whatever Python does."""
    import _signal
    import posix

    for module, names in ((posix, ("mknod", "mkfifo", "pidfd_open")), (os, ("mknod", "mkfifo", "pidfd_open")),
                          (_signal, ("pidfd_send_signal",))):
        for name in names:
            if hasattr(module, name):
                delattr(module, name)


def _prepare(spec: dict):
    """(source, path, request lines, wire module); exits with ``SETUP_FAILED`` when it cannot."""
    try:
        wire = _module("wire", spec["sources"]["wire"])
        guard = _module("guard", spec["sources"]["guard"])
        requests = os.fdopen(spec["requests"], "rb")
        kind, source = json.loads(requests.readline())
        if kind != "program" or type(source) is not str:
            raise ValueError("the checker sent no program")
        path = os.path.join(spec["tmp"], "program.py")
        try:  # the fallback's checker made it (nothing can be created there); the namespaces' tmpfs is empty
            fd = os.open(path, os.O_WRONLY | os.O_TRUNC | os.O_NOFOLLOW | os.O_CLOEXEC)
        except FileNotFoundError:
            fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_TRUNC | os.O_NOFOLLOW | os.O_CLOEXEC, 0o600)
        with os.fdopen(fd, "w", encoding="utf-8") as f:
            f.write(source)
        import linecache  # tracebacks from memory: the fallback's folder is write-only

        linecache.cache[path] = (len(source), None, source.splitlines(True), path)
        sys.argv[:] = [path]
        os.environ["TMPDIR"] = spec["tmp"]  # the loader drops it where the real and effective uid differ
        _remove_unaudited()
        if spec["guard"]:
            guard.install(spec["tmp"], spec["readable"], spec["hidden"], spec["extension_dirs"], spec["extensions"],
                          frozenset(spec["denied_modules"]), spec["replies"])
        return source, path, requests, wire
    except BaseException as e:  # noqa: BLE001 — fail closed: no layer, no run
        print(f"sandbox setup failed: {type(e).__name__}: {e}", file=sys.stderr)
        os._exit(SETUP_FAILED)


def main(spec: dict) -> None:
    replies = spec["replies"]
    source, path, requests, wire = _prepare(spec)

    def send(message) -> None:
        view = memoryview(wire.dumps(message))
        while view:
            view = view[os.write(replies, view):]

    namespace = {"__name__": "__main__", "__file__": path, "__builtins__": __builtins__}
    try:
        exec(compile(source, path, "exec"), namespace)
    except BaseException as e:  # noqa: BLE001 — SystemExit and KeyboardInterrupt included: not an end
        import traceback

        traceback.print_exc()
        for stream in (sys.stdout, sys.stderr):
            try:
                stream.flush()
            except BaseException:  # noqa: BLE001 — the program may have broken its streams
                pass
        send(["error", f"{type(e).__name__}: {e}"[:500]])
        os._exit(1)
    sys.stdout.flush()
    if spec["entry_point"] is None:
        send(["done"])
        return
    send(["ready"])
    for line in requests:
        notes: set = set()
        try:
            args, kwargs = wire.from_wire(json.loads(line))
            result = namespace[spec["entry_point"]](*args, **kwargs)
        except BaseException as e:  # noqa: BLE001 — reported to the checker, which fails the test
            send(["raised", type(e).__name__, str(e)[:1000]])
            continue
        try:
            reply = ["ok", wire.to_wire(result, notes), sorted(notes)]
        except (TypeError, ValueError, RecursionError) as e:
            reply = ["unsupported", str(e)[:200]]
        send(reply)


if __name__ == "__main__":
    main(json.loads(sys.argv[1]))
