"""The sandboxed program seen from the checker: started (confined by :func:`.kernel.confine`
between ``fork`` and ``exec``), fed its source, called, watched, killed. Runs in the checker."""
from __future__ import annotations

import json
import os
import select
import signal
import subprocess
import time
from pathlib import Path

from . import kernel, wire

MAX_REPLY_BYTES = 8 << 20  # one result from the program, JSON-encoded
MAX_OUTPUT_BYTES = 1 << 20  # the program's stdout and stderr kept, each
MAX_REPORTS = 32  # of each kind the audit hook reports (files it had no reason to open; refusals), kept
_HERE = Path(__file__).resolve().parent


class Deadline(BaseException):
    """The run's wall-clock limit passed (a BaseException: test code cannot swallow it)."""


class CandidateError(Exception):
    """A call into the sandboxed program failed: it died, answered garbage, went over its disk
    quota, or returned something that is not plain data."""


class Program:
    """One sandboxed program, started in ``__init__``; ``job`` as made by :mod:`.api`."""

    def __init__(self, job: dict, deadline: float):
        self.deadline, self.plan = deadline, job["plan"]
        self.tmp = self.plan["tmp"]
        self.quota = None if self.plan["mode"] == "namespaces" else self.plan["disk_mb"] << 20
        req_r, self.req_w = os.pipe()
        self.resp_r, resp_w = os.pipe()
        folder = os.path.dirname(self.tmp)
        self.out, self.err = _anonymous_file(folder), _anonymous_file(folder)
        view = self.plan["view"]
        spec = {"tmp": self.tmp, "guard": job["guard"], "entry_point": (job["check"] or {}).get("entry_point"),
                "requests": req_r, "replies": resp_w, "readable": view["stdlib"], "hidden": view["hidden_dirs"],
                "extension_dirs": sorted({os.path.dirname(p) for p in view["extensions"]}),
                "extensions": sorted({os.path.basename(p).split(".")[0] for p in view["extensions"]}),
                "denied_modules": job["denied_modules"],
                "sources": {name: (_HERE / f"{name}.py").read_text(encoding="utf-8") for name in ("wire", "guard")}}
        cmd = [view["exe"], "-I", "-S", "-B", "-c", (_HERE / "program.py").read_text(encoding="utf-8"),
               json.dumps(spec)]
        env = {"TMPDIR": self.tmp, "LANG": "C.UTF-8"}  # nothing a library reads its configuration from
        plan = self.plan
        self.proc = subprocess.Popen(cmd, cwd=self.tmp, env=env, stdin=subprocess.DEVNULL, stdout=self.out,
                                     stderr=self.err, pass_fds=(req_r, resp_w), start_new_session=True,
                                     preexec_fn=lambda: kernel.confine(plan))
        os.close(req_r)
        os.close(resp_w)
        self.buffer = bytearray()
        self.notes: set[str] = set()
        self.reports: dict[str, list[str]] = {"file": [], "denied": []}
        self.over_quota = False

    def feed(self, source: str) -> None:
        """Send the program's source (the first line it reads)."""
        try:
            _write_all(self.req_w, wire.dumps(["program", source]), self.deadline)
        except BrokenPipeError:  # it died before reading: receive() says how
            pass

    def receive(self):
        """The program's next message (a JSON list), or ``None`` at end of file. The audit hook's
        reports (``file``, ``denied``: see :mod:`.guard`) are recorded on the way."""
        while True:
            message = self._next_line()
            if message is None or message[0] not in self.reports:
                return message
            kept = self.reports[message[0]]
            if len(message) == 2 and type(message[1]) is str and len(kept) < MAX_REPORTS:
                try:
                    text = bytes.fromhex(message[1]).decode("utf-8", "replace")[:500]
                except ValueError:
                    text = "(unreadable)"
                if text not in kept:  # the program reports each time: repeats are dropped here
                    kept.append(text)

    def _next_line(self):
        while b"\n" not in self.buffer:
            remaining = self.deadline - time.monotonic()
            if remaining <= 0:
                raise Deadline()
            ready = select.select([self.resp_r], [], [], min(remaining, 0.1) if self.quota else remaining)[0]
            self._check_quota()
            if not ready:
                continue
            chunk = os.read(self.resp_r, 1 << 16)
            if not chunk:
                return None
            self.buffer += chunk
            if len(self.buffer) > MAX_REPLY_BYTES and b"\n" not in self.buffer:
                raise CandidateError(f"a reply larger than {MAX_REPLY_BYTES} bytes")
        line, _, rest = bytes(self.buffer).partition(b"\n")
        self.buffer = bytearray(rest)
        try:
            message = json.loads(line)
        except (ValueError, RecursionError) as e:
            raise CandidateError(f"unreadable reply: {e}") from None
        if type(message) is not list or not message or type(message[0]) is not str:
            raise CandidateError("malformed reply")
        return message

    def _check_quota(self) -> None:
        """Fallback only (namespaces: the tmpfs is the quota): its folder's size, polled while the
        checker waits; over the quota, the program is killed."""
        if self.quota is not None and not self.over_quota and folder_usage(self.tmp) > self.quota:
            self.over_quota = True
            self.kill()
            raise CandidateError(f"the program wrote more than {self.quota >> 20} MB (its disk quota)")

    def call(self, args: tuple, kwargs: dict):
        try:
            request = wire.dumps(wire.to_wire((args, kwargs), set()))
        except (TypeError, ValueError) as e:
            raise CandidateError(f"the test passed an argument that cannot be sent: {e}") from None
        try:
            _write_all(self.req_w, request, self.deadline)
        except BrokenPipeError:
            raise CandidateError(self.ended()) from None
        message = self.receive()
        if message is None:
            raise CandidateError(self.ended())
        kind = message[0]
        if kind == "ok" and len(message) == 3 and type(message[2]) is list:
            self.notes.update(str(n)[:200] for n in message[2][:20])
            try:
                return wire.from_wire(message[1])
            except (ValueError, TypeError, RecursionError) as e:
                raise CandidateError(f"malformed result: {e}") from None
        if kind == "raised" and len(message) == 3:
            raise _exception(str(message[1]), str(message[2]))
        if kind == "unsupported" and len(message) == 2:
            note = f"{str(message[1])[:200]} (not plain data)"
            self.notes.add(note)
            raise CandidateError(f"the program returned {note}")
        raise CandidateError("malformed reply")

    def ended(self) -> str:
        try:
            code = self.proc.wait(timeout=1)
        except subprocess.TimeoutExpired:  # still running: it closed its pipes
            code = None
        return f"the program ended during a call (exit code {code})"

    def kill(self) -> None:
        try:
            os.killpg(self.proc.pid, signal.SIGKILL)
        except (ProcessLookupError, PermissionError):
            pass

    def stop(self) -> tuple[int | None, str, str]:
        """Kill the program and everything it started; (exit code, stdout, stderr)."""
        for fd in (self.req_w, self.resp_r):
            try:
                os.close(fd)
            except OSError:
                pass
        try:
            self.proc.wait(timeout=0.5)  # at end of file, a checked program leaves on its own
        except subprocess.TimeoutExpired:
            pass
        self.kill()
        self.proc.wait()
        reap_descendants()
        outputs = []
        for f in (self.out, self.err):
            f.seek(0)
            outputs.append(f.read(MAX_OUTPUT_BYTES).decode("utf-8", "replace"))
            f.close()
        return self.proc.returncode, outputs[0], outputs[1]


def folder_usage(folder: str, max_entries: int = 10_000) -> int:
    """Bytes a folder's files take on disk (allocated blocks); past ``max_entries`` entries, infinite."""
    total, entries, todo = 0, 0, [folder]
    while todo:
        try:
            with os.scandir(todo.pop()) as it:
                for entry in it:
                    entries += 1
                    if entries > max_entries:
                        return 1 << 62
                    st = entry.stat(follow_symlinks=False)
                    total += st.st_blocks * 512
                    if entry.is_dir(follow_symlinks=False):
                        todo.append(entry.path)
        except OSError:
            continue
    return total


def _anonymous_file(folder: str):
    """A file with no name (unreachable by path), for the program's stdout or stderr."""
    try:
        return os.fdopen(os.open(folder, os.O_TMPFILE | os.O_RDWR | os.O_CLOEXEC, 0o600), "w+b")
    except (AttributeError, OSError):  # no O_TMPFILE here
        import tempfile

        return tempfile.TemporaryFile(dir=folder)


def _write_all(fd: int, data: bytes, deadline: float) -> None:
    view = memoryview(data)
    while view:
        remaining = deadline - time.monotonic()
        if remaining <= 0 or not select.select([], [fd], [], remaining)[1]:
            raise Deadline()
        view = view[os.write(fd, view[: 1 << 16]):]


def _exception(name: str, message: str) -> Exception:
    """The checker-side exception for one the program raised: the builtin class of that name where
    it is an ``Exception`` (so a test could catch it), else :class:`CandidateError`."""
    import builtins

    cls = getattr(builtins, name, None)
    if isinstance(cls, type) and issubclass(cls, Exception):
        try:
            return cls(message[:1000])
        except Exception:  # noqa: BLE001 — a constructor with other arguments (UnicodeError, ...)
            pass
    return CandidateError(f"{name[:100]}: {message[:1000]}")


def reap_descendants() -> None:
    """Kill and reap every remaining descendant: orphans re-parent to the checker (a subreaper)."""
    while True:
        children = []
        for entry in os.listdir("/proc"):
            try:
                with open(f"/proc/{entry}/stat", "rb") as f:
                    if int(f.read().rsplit(b")", 1)[1].split()[1]) == os.getpid():
                        children.append(int(entry))
            except (OSError, IndexError, ValueError):
                continue
        if not children:
            return
        for pid in children:  # each SIGKILLed and waited for; their own orphans come next round
            try:
                os.kill(pid, signal.SIGKILL)
                os.waitpid(pid, 0)
            except (ProcessLookupError, ChildProcessError):
                pass

