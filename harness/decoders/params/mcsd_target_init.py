"""``mcsd_target_init``'s keys (n_t target-sampled roots, the draft tree below them)."""
from __future__ import annotations

from dataclasses import dataclass

from harness.decoders.params.mcsd import check_k_config
from harness.decoders.params.mcsd_dynamic import EarlyStopParams
from harness.errors import ConfigError
from harness.params import param


@dataclass(frozen=True)
class TargetInitParams(EarlyStopParams):
    k_config: tuple[int, ...] = param((2, 4, 3, 1, 1), "n_t target-sampled roots, then children per node at each "
                                                       "draft depth; γ = len(k_config) − 1 (mcsd §4.1: "
                                                       "(2, 4, 3, 1, 1); n_t = 1 is lossless)")

    greedy_roots: str | None = param(None, "the roots under greedy decoding: null (= argmax) the target's argmax, one "
                                           "root, exact; top_nt the target's top-n_t tokens (mcsd Table 4's T 0 rows; "
                                           "lossy: a non-argmax root may win)")

    def __post_init__(self):
        super().__post_init__()
        object.__setattr__(self, "k_config", check_k_config(self.k_config, min_length=2))
        if self.greedy_roots not in GREEDY_ROOTS:
            raise ConfigError(f"mcsd_target_init: greedy_roots must be one of {', '.join(map(str, GREEDY_ROOTS))} "
                              f"(null = argmax); got {self.greedy_roots!r}")

    @property
    def top_roots(self) -> bool:
        """Several roots under greedy decoding: the target's top-n_t tokens (the paper's T 0 variant)."""
        return self.warp.is_greedy and self.greedy_roots == "top_nt" and self.k_config[0] > 1

    @property
    def gamma(self) -> int:
        """The draft depth γ below the target-sampled roots."""
        return len(self.k_config) - 1

    @property
    def lookahead(self) -> int:
        return len(self.k_config) + 1  # the roots, γ drafts below them, and the next round's root

    @property
    def target_tokens(self) -> int:
        """n_t, the target-initialised tokens per round."""
        return self.k_config[0]


GREEDY_ROOTS = (None, "argmax", "top_nt")


Params = TargetInitParams
