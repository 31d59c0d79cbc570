"""The keeper: a trusted process between the checker and the program, so that the program dies
with the checker whatever happens to the checker.

A parent-death signal alone does not do it: the kernel clears it when the program's uid changes
and when the program's interpreter starts in secure-exec mode (real and effective uid differ, as
in the fallback run as root). The keeper keeps root's credentials, so its own parent-death signal
holds: when the checker dies it kills the program and leaves. In the namespaces mode it is PID 1
of the program's PID namespace, whose end kills every process in it. It holds no descriptor but
stdout and stderr, forwards the program's exit status (``128 + n`` for death by signal ``n``) and
never runs anything else.
"""
from __future__ import annotations

import os
import signal

from .libc import PR_SET_PDEATHSIG, prctl


def split() -> None:
    """Fork: returns in the program's process; the keeper (the caller's side) never returns."""
    program = [0]

    def checker_died(signum, frame):
        if program[0]:
            os.kill(program[0], signal.SIGKILL)
        os._exit(128 + signal.SIGKILL)

    signal.signal(signal.SIGTERM, checker_died)
    prctl(PR_SET_PDEATHSIG, signal.SIGTERM, "parent-death signal")
    pid = os.fork()
    if pid == 0:
        signal.signal(signal.SIGTERM, signal.SIG_DFL)
        return
    program[0] = pid
    try:
        os.closerange(3, os.sysconf("SC_OPEN_MAX"))  # the pipes' ends and Popen's error pipe: EOF stays honest
        _, status = os.waitpid(pid, 0)
        code = os.waitstatus_to_exitcode(status)
    except BaseException:  # noqa: BLE001 — nothing to forward: the program goes too
        os.kill(pid, signal.SIGKILL)
        code = -signal.SIGKILL
    os._exit(code if code >= 0 else 128 - code)
