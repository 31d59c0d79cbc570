"""``lookahead``'s keys (W, N, G)."""
from __future__ import annotations

from dataclasses import dataclass

from harness.decoders.params import SpeculativeParams, param


@dataclass(frozen=True)
class LookaheadParams(SpeculativeParams):
    window: int = param(15, "W: lookahead window, future positions decoded in parallel (paper: 15 for 7B, A100)")
    ngram: int = param(5, "N: n-gram size, Jacobi levels kept + 1 (paper: 5)")
    guess: int = param(15, "G: most cached n-grams verified per step (paper: G = W)")

    @property
    def gamma(self) -> int:
        return self.ngram - 1

    @property
    def lookahead(self) -> int:
        return max(self.window + self.ngram - 2, self.ngram - 1) + 1  # the window's deepest node, + the bonus

    def __post_init__(self):
        super().__post_init__()
        self.check_at_least(1, "window", "guess")
        self.check_at_least(2, "ngram")


Params = LookaheadParams
