"""``medusa``'s keys (the heads, the tree)."""
from __future__ import annotations

import json
from dataclasses import dataclass
from functools import cached_property

from harness.decoders.params import SpeculativeParams, param
from harness.errors import ConfigError

TREES = ("mc_sim_7b_63",)  # the named trees (harness.heads.medusa: MC_SIM_7B_63, the reference's default)


@dataclass(frozen=True)
class MedusaParams(SpeculativeParams):
    heads: str = param("tiny/medusa", "Medusa heads: tiny/medusa (embedded, on tiny/target), a checkpoint "
                                      "directory or a hub id (FasterDecoding/Medusa layout)")
    choices: str = param("mc_sim_7b_63", f"the tree: {' | '.join(TREES)} (Medusa's default, 63 nodes), or a JSON "
                                         "list of rank paths, e.g. [[0], [0, 0], [1]]")
    tree_nodes: int | None = param(None, "keep the first N choices only (ordered by importance); null: all")

    def __post_init__(self):
        super().__post_init__()
        self.paths  # validates choices  # noqa: B018
        if self.tree_nodes is not None:
            self.check_at_least(1, "tree_nodes")

    @cached_property
    def paths(self) -> tuple[tuple[int, ...], ...]:
        """The choices as rank paths, cut to ``tree_nodes``."""
        from harness.heads.medusa import MC_SIM_7B_63, medusa_tree  # torch: when a config is checked, not listed

        if self.choices in TREES:
            paths = {"mc_sim_7b_63": MC_SIM_7B_63}[self.choices]
        else:
            try:
                paths = tuple(tuple(int(r) for r in p) for p in json.loads(self.choices))
            except (ValueError, TypeError) as exc:
                raise ConfigError(f"method.choices={self.choices!r}: neither a tree name ({', '.join(TREES)}) nor a "
                                  f"JSON list of rank paths ({exc})") from None
        paths = paths[: self.tree_nodes]
        medusa_tree(paths)  # every path's parent must be a path too
        return paths

    @property
    def gamma(self) -> int:
        """The tree's depth (its deepest path)."""
        return max(len(p) for p in self.paths)


Params = MedusaParams
