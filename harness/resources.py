"""Where the harness's shipped files are: one locator for the whole package.

In a checkout the configs and the task data sit at the repository's top level, beside the package
(``conf/``: Hydra's primary config directory; ``tasks/<dataset>/``: prompts, databases, licences); a wheel maps
them into the package (``harness/conf``, ``harness/data``: ``package-dir`` in ``setup.py``), so an installed
wheel runs anywhere. Every caller finds them here, never relative to its own file.
"""
from __future__ import annotations

from importlib.resources import files
from pathlib import Path

#: folder name inside an installed package -> folder name at the top of a checkout
_SHIPPED = {"conf": "conf", "data": "tasks"}


def package_dir() -> Path:
    """The ``harness`` package folder (installed or in a checkout; a symlinked package resolves to its checkout)."""
    return Path(str(files("harness"))).resolve()


def _shipped(name: str) -> Path:
    """``harness/<name>`` in an install, else ``<checkout>/<top-level name>``."""
    inside = package_dir() / name
    return inside if inside.is_dir() else package_dir().parent / _SHIPPED[name]


def conf_dir() -> Path:
    """Hydra's primary config directory (groups method, decoding, pair, dataset, gpu, ...)."""
    return _shipped("conf")


def data_dir() -> Path:
    """The shipped task data; a dataset's relative ``path`` is resolved against it."""
    return _shipped("data")


def assets_dir() -> Path:
    """Shipped model files (``harness/assets``: the tiny pair, the trained decision models)."""
    return package_dir() / "assets"


def source_root() -> Path | None:
    """The git checkout the package runs from (for the git sha in provenance), or None when installed."""
    root = package_dir().parent
    return root if (root / ".git").exists() else None
