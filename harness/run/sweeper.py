"""The ``grids`` sweeper: Hydra's basic sweeper plus a union of named grids.

A seed's table compares methods whose parameters differ (beam sampling's ``width``, DSBD's
``draft_width``, BiLD's thresholds per dataset, ...); one Cartesian product cannot express that,
because a key of one method is unknown to another. ``hydra.sweeper.grids`` lists named sub-grids,
each a mapping ``override key -> sweep value`` exactly like ``hydra.sweeper.params``; the cells of a
sweep are the union over the grids of ``params x grid``, with the command line's overrides last (a key
given on the command line replaces the same key of ``params`` and of every grid). Without ``grids``
this is Hydra's :class:`BasicSweeper` unchanged. Identical cells from two grids run once.

The sweeper class itself lives in ``hydra_plugins/harness_grids`` (Hydra loads sweepers only from the
``hydra_plugins`` namespace); this module holds its config and the expansion. Used by the experiments
(``conf/experiment/*.yaml``, ``harness -m +experiment=NAME``), which select it with ``override /hydra/sweeper: grids``.
A grid is dropped from the command line with
``~hydra.sweeper.grids.NAME``. :func:`sweep_overrides` gives the cells' override lists without
running anything (tests, validation, planning tools).
"""
from __future__ import annotations

import importlib
import importlib.util
import sys
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Dict, Mapping, Optional, Sequence

from hydra._internal.core_plugins.basic_sweeper import BasicSweeper, BasicSweeperConf
from hydra.core.config_store import ConfigStore
from hydra.core.override_parser.overrides_parser import OverridesParser
from omegaconf import DictConfig, OmegaConf

SWEEPER_GROUP = "hydra/sweeper"
SWEEPER_NAME = "grids"
PLUGIN_MODULE = "hydra_plugins.harness_grids"


@dataclass
class GridSweeperConf(BasicSweeperConf):
    _target_: str = f"{PLUGIN_MODULE}.GridSweeper"
    grids: Optional[Dict[str, Any]] = None  # name -> {override key: sweep value}; null = BasicSweeper


def _as_arguments(mapping: Mapping[str, Any] | None) -> list[str]:
    return [f"{k}={v}" for k, v in (mapping or {}).items()]


def sweep_overrides(params: Mapping[str, Any] | None, grids: Mapping[str, Any] | None,
                    arguments: Sequence[str] = (), config_loader=None) -> list[list[str]]:
    """Every cell's override list: the union over ``grids`` of params x grid x arguments (arguments last,
    so they win over the same key), in grid order, duplicates removed; just params x arguments without
    grids. Values use Hydra's override grammar (``a,b``, ``range(1,5)``, ``choice(...)``)."""
    parser = OverridesParser.create(config_loader=config_loader)
    groups = [_as_arguments(g) for g in (grids or {}).values() if g is not None] or [[]]
    cells: list[list[str]] = []
    seen: set[tuple[str, ...]] = set()
    for grid in groups:
        overrides = parser.parse_overrides([*_as_arguments(params), *grid, *arguments])
        for batch in BasicSweeper.split_arguments(overrides, None):
            for cell in batch:
                key = tuple(cell)
                if key not in seen:
                    seen.add(key)
                    cells.append(list(cell))
    return cells


def config_sweep_overrides(config: DictConfig, arguments: Sequence[str] = (), config_loader=None) -> list[list[str]]:
    """:func:`sweep_overrides` for a composed primary config (``hydra.sweeper.params`` and ``.grids``)."""
    def plain(key: str):
        node = OmegaConf.select(config, key)
        return OmegaConf.to_container(node, resolve=False) if node is not None else None

    return sweep_overrides(plain("hydra.sweeper.params"), plain("hydra.sweeper.grids"), arguments, config_loader)


def register_sweeper() -> None:
    """Store ``hydra/sweeper=grids`` in Hydra's ConfigStore."""
    ConfigStore.instance().store(group=SWEEPER_GROUP, name=SWEEPER_NAME, node=GridSweeperConf, provider="harness")


def load_sweeper_plugin() -> None:
    """Make sure Hydra knows the plugin class: found by Hydra's own scan when ``hydra_plugins/`` is on the
    path (an install, or PYTHONPATH at the checkout); otherwise loaded from the checkout next to this
    package (an install made before the plugin existed) and registered with Hydra by hand."""
    from hydra.core.plugins import Plugins

    plugins = Plugins.instance()  # Hydra's scan first: it re-executes its core plugins' modules (BasicSweeper)
    try:
        module = importlib.import_module(PLUGIN_MODULE)
    except ImportError:
        path = Path(__file__).resolve().parents[2] / "hydra_plugins" / "harness_grids" / "__init__.py"
        spec = importlib.util.spec_from_file_location(PLUGIN_MODULE, path)
        if spec is None or spec.loader is None or not path.is_file():
            raise
        module = importlib.util.module_from_spec(spec)
        sys.modules[PLUGIN_MODULE] = module
        spec.loader.exec_module(module)
    plugins.register(module.GridSweeper)


__all__ = ["GridSweeperConf", "load_sweeper_plugin", "config_sweep_overrides", "register_sweeper", "sweep_overrides"]
