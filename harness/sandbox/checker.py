"""The checker (trusted): its own process, between the harness and the sandboxed program::

    harness ──stdin: job + nonce──▶ checker ──pipe: call(args)──▶ sandboxed program
            ◀─stdout: verdict+nonce─         ◀─pipe: plain-data result, file reports─

It runs the problem's test (``check(candidate)``) and the prompt's helpers in its own interpreter;
``candidate`` there is a proxy that sends each call's arguments to the program and gets back a
plain-data copy of the result. The verdict is "``check`` returned normally", written with the
nonce as the last line of its stdout, which the program never holds. Started by
:mod:`harness.sandbox.api` as ``python -I -S -B -c`` with the package's parent on ``sys.path``.
"""
from __future__ import annotations

import json
import os
import signal
import sys
import time

from . import wire
from .channel import Deadline, Program, folder_usage
from .kernel import SETUP_FAILED, namespaces, seccomp, uid
from .kernel.libc import PR_SET_CHILD_SUBREAPER, PR_SET_DUMPABLE, libc, prctl


def _alarm(signum, frame):
    raise Deadline()


def _run(job: dict, program_box: list) -> tuple[bool, bool, str]:
    """(passed, timed out, reason) of one job; the started program is put in ``program_box``."""
    check = job["check"]
    deadline = time.monotonic() + float(job["timeout_s"])
    signal.signal(signal.SIGALRM, _alarm)
    signal.setitimer(signal.ITIMER_REAL, float(job["timeout_s"]) + 0.05)
    try:
        try:
            program = Program(job, deadline)
            program_box.append(program)
            program.feed(job["program"])
            first = program.receive()
            if check is None:
                passed = first == ["done"] and _exit_code(program.proc, deadline) == 0
                return passed, False, "ran to its end" if passed else _not_ready(first, program)
            if first != ["ready"]:
                return False, False, _not_ready(first, program)
            scope: dict = {"__name__": "__check__"}
            exec(compile(check["test_context"], "<prompt>", "exec"), scope)
            exec(compile(check["test"], "<test>", "exec"), scope)

            def candidate(*args, **kwargs):
                return program.call(args, kwargs)

            candidate.__name__ = candidate.__qualname__ = str(check["entry_point"])
            scope[check["entry_point"]] = candidate
            scope["check"](candidate)
            return True, False, "the test passed"
        finally:
            signal.setitimer(signal.ITIMER_REAL, 0)
    except Deadline:
        return False, True, f"timed out after {job['timeout_s']} s"
    except Exception as e:  # noqa: BLE001 — any failure of the test is a failed check
        import traceback

        where = [f"{fr.filename}:{fr.lineno}" for fr in traceback.extract_tb(e.__traceback__)
                 if fr.filename in ("<test>", "<prompt>")]
        return False, False, f"{type(e).__name__}: {str(e)[:500]}" + (f" at {where[-1]}" if where else "")


def _exit_code(proc, deadline: float) -> int:
    import subprocess

    try:
        return proc.wait(max(0.0, deadline - time.monotonic()))
    except subprocess.TimeoutExpired:
        raise Deadline() from None


def _not_ready(first, program: Program) -> str:
    if first is None:
        return f"the program ended before it was ready (exit code {program.proc.wait()})"
    if first[0] == "error" and len(first) == 2:
        return f"the program raised {str(first[1])[:500]}"
    return "the program sent an unexpected first message"


def main() -> None:
    """Job on stdin, verdict (with the nonce) as the last line of stdout."""
    job = json.loads(sys.stdin.buffer.read())
    verdict_fd = os.dup(1)
    os.dup2(2, 1)  # the test's own prints go to stderr, never into the verdict channel
    plan = job["plan"]
    plan["uid"] = uid.identity(**plan["identity"], checker_pid=os.getpid())
    libc()  # loaded here: the program's process cannot see the libraries once its view is built
    if plan["seccomp"]:
        seccomp.library()
    if plan["mode"] == "namespaces":
        namespaces.enter_for_children()  # before PR_SET_DUMPABLE: a user namespace writes its own maps
    prctl(PR_SET_DUMPABLE, 0)  # /proc/<checker>/{mem,environ,fd} closed to same-uid processes
    prctl(PR_SET_CHILD_SUBREAPER, 1)  # orphans of the program re-parent here, and are killed
    box: list[Program] = []
    passed, timed_out, reason = _run(job, box)
    program = box[0] if box else None
    if program is not None and program.quota is not None and folder_usage(program.tmp) > program.quota:
        passed, reason = False, f"the program wrote more than {program.quota >> 20} MB (its disk quota)"
    returncode, stdout, stderr = program.stop() if program else (None, "", "")
    if returncode == SETUP_FAILED and not passed:
        reason = stderr.strip()[-500:] or "sandbox setup failed"
    verdict = {"nonce": job["nonce"], "passed": passed, "timed_out": timed_out, "reason": reason,
               "returncode": returncode, "stdout": stdout, "stderr": stderr,
               "flags": sorted(program.notes) if program else [],
               "files": program.reports["file"] if program else [],
               "denied": program.reports["denied"] if program else []}
    os.write(verdict_fd, b"\n" + wire.dumps(verdict))

