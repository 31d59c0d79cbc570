"""Hydra sweeper plugin ``hydra/sweeper=grids`` (see :mod:`harness.run.sweeper`): Hydra's basic sweeper whose
cells are the union over ``hydra.sweeper.grids`` of ``params x grid``. Hydra instantiates sweepers only
from the ``hydra_plugins`` namespace, hence this package; the logic is in :mod:`harness.run.sweeper`."""
from __future__ import annotations

from typing import Any, Dict, List, Optional

from hydra._internal.core_plugins.basic_sweeper import BasicSweeper

from harness.run.sweeper import register_sweeper, sweep_overrides


class GridSweeper(BasicSweeper):
    """:class:`BasicSweeper` whose cells are :func:`sweep_overrides` (params x each grid)."""

    def __init__(self, max_batch_size: Optional[int], params: Optional[Dict[str, str]] = None,
                 grids: Optional[Dict[str, Any]] = None) -> None:
        super().__init__(max_batch_size=max_batch_size, params=params)
        self.grids = grids or {}

    def sweep(self, arguments: List[str]) -> Any:
        if not self.grids:
            return super().sweep(arguments)
        assert self.hydra_context is not None
        cells = sweep_overrides(self.params, self.grids, arguments, self.hydra_context.config_loader)
        # BasicSweeper.sweep parses params + arguments and splits them; hand it the finished cells instead.
        size = self.max_batch_size
        try:
            self.split_arguments = lambda _overrides, _size: (  # type: ignore[method-assign]
                [cells] if size is None else [cells[i:i + size] for i in range(0, len(cells), size)])
            self.params = {}
            return super().sweep([])
        finally:
            del self.split_arguments


register_sweeper()

__all__ = ["GridSweeper"]
