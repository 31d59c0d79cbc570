"""Resource limits of the program (soft = hard, so it cannot raise them; seccomp also refuses
``setrlimit``). They bind because the program is not root: ``RLIMIT_NPROC`` exempts uid 0."""
from __future__ import annotations

import os
import resource
from pathlib import Path


def user_tasks(uid: int) -> int:
    """Processes and threads of ``uid`` now (what ``RLIMIT_NPROC`` counts for a shared uid)."""
    count = 0
    for status in Path("/proc").glob("[0-9]*/status"):
        try:
            fields = dict(line.split(":", 1) for line in status.read_text().splitlines() if ":" in line)
            if int(fields["Uid"].split()[0]) == uid:
                count += int(fields["Threads"])
        except (OSError, KeyError, ValueError):
            continue
    return count


def limits(timeout_s: float, memory_mb: int, max_file_mb: int, max_open_files: int, max_processes: int,
           own_uid: bool) -> list[tuple[int, int]]:
    """``(resource, value)`` pairs. ``own_uid``: the program runs as a uid of its own (counted
    alone); else as the invoking user, whose current tasks are added to the process limit."""
    nproc = max_processes + (0 if own_uid else user_tasks(os.getuid()))
    return [(resource.RLIMIT_CPU, int(timeout_s) + 1), (resource.RLIMIT_AS, memory_mb << 20),
            (resource.RLIMIT_FSIZE, max_file_mb << 20), (resource.RLIMIT_CORE, 0),
            (resource.RLIMIT_NOFILE, max_open_files), (resource.RLIMIT_NPROC, nproc),
            (resource.RLIMIT_MEMLOCK, 0), (resource.RLIMIT_MSGQUEUE, 0)]


def apply(pairs) -> None:
    for which, value in pairs:
        resource.setrlimit(which, (value, value))
