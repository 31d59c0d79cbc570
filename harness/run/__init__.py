"""Running cells: plans and plan files, one cell's run (lock, resume, fingerprint), the runner, the sweeper.

The package is also callable: ``harness.run(method="sd", decoding="greedy", ...)`` is
:func:`harness.api.run` (the Python API; ``harness.run`` names this room, so the call goes through the module)."""
import sys
import types


class _CallableRoom(types.ModuleType):
    def __call__(self, *args, **kwargs):
        from harness.api import run

        return run(*args, **kwargs)


sys.modules[__name__].__class__ = _CallableRoom
