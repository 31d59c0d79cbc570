"""``mcsd``'s keys (the tree's k_config)."""
from __future__ import annotations

from dataclasses import dataclass

from harness.decoders.params import SpeculativeParams, param
from harness.errors import ConfigError


def check_k_config(k_config, min_length: int = 1) -> tuple[int, ...]:
    """``k_config`` as a tuple of positive ints, at least ``min_length`` long; a ConfigError naming it otherwise."""
    try:
        out = tuple(int(k) for k in k_config)
    except (TypeError, ValueError) as e:
        raise ConfigError(f"k_config must be a list of positive integers, got {k_config!r}") from e
    if len(out) < min_length or (out and min(out) < 1):
        raise ConfigError(f"k_config must be a list of at least {min_length} positive integer(s), got {k_config!r}")
    return out


@dataclass(frozen=True)
class MCSDParams(SpeculativeParams):
    k_config: tuple[int, ...] = param((4, 2, 2, 1), "children per node at each depth; depth γ = len(k_config) "
                                      "(mcsd: (4, 2, 2, 1))")
    replacement: bool = param(False, "false: candidates drawn without replacement (MCSD); true: i.i.d. (SpecInfer)")

    def __post_init__(self):
        super().__post_init__()
        object.__setattr__(self, "k_config", check_k_config(self.k_config))

    @property
    def gamma(self) -> int:
        """The tree's depth γ."""
        return len(self.k_config)


Params = MCSDParams
