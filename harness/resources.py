"""Where the harness's shipped files are: one locator for the whole package.

The configs (``harness/conf``: Hydra's primary config directory) and the task data
(``harness/data/<dataset>/``: prompts, databases, licences) ship inside the package, so an installed
wheel runs anywhere; they are found with :mod:`importlib.resources`, never relative to a checkout.
"""
from __future__ import annotations

from importlib.resources import files
from pathlib import Path


def package_dir() -> Path:
    """The installed ``harness`` package folder."""
    return Path(str(files("harness")))


def conf_dir() -> Path:
    """Hydra's primary config directory (``harness/conf``: groups method, decoding, pair, dataset, gpu, ...)."""
    return package_dir() / "conf"


def data_dir() -> Path:
    """The shipped task data (``harness/data``); a dataset's relative ``path`` is resolved against it."""
    return package_dir() / "data"


def assets_dir() -> Path:
    """Shipped model files (``harness/assets``: the tiny pair, the trained decision models)."""
    return package_dir() / "assets"


def source_root() -> Path | None:
    """The git checkout the package runs from (for the git sha in provenance), or None when installed."""
    root = package_dir().parent
    return root if (root / ".git").exists() else None
