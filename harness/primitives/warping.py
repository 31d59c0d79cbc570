"""Logit warping T: temperature, then top-k, then top-p (mtad App. F; dsbd §2.1).

Semantics match HF transformers' ``TemperatureLogitsWarper`` → ``TopKLogitsWarper`` →
``TopPLogitsWarper`` so that a decoder using :class:`Warp` samples from exactly the
distribution HF ``generate(do_sample=True, ...)`` samples from: top-p keeps, in
descending order, every token whose *exclusive* cumulative probability is below
``top_p`` (so the token that crosses the threshold is kept, and at least one token is).
"""
from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING

from harness.errors import ConfigError

if TYPE_CHECKING:
    import torch

#: Valid temperatures besides 0 (greedy). Below 0.01 sampling is argmax up to float underflow, which breaks the
#: speculative rules' ratios and residuals; above 100 it is uniform sampling.
TEMPERATURE_RANGE = (0.01, 100.0)


@dataclass(frozen=True)
class Warp:
    """The warping operation T. ``temperature == 0`` means deterministic (argmax) decoding."""

    temperature: float = 1.0
    top_k: int = 0  # 0 = off
    top_p: float = 1.0  # 1.0 = off

    def __post_init__(self):
        t = self.temperature
        if not isinstance(t, (int, float)) or not (t == 0 or TEMPERATURE_RANGE[0] <= t <= TEMPERATURE_RANGE[1]):
            raise ConfigError(f"temperature must be >= 0: 0 (greedy) or in [{TEMPERATURE_RANGE[0]}, "
                              f"{TEMPERATURE_RANGE[1]}] (nearer 0 the warped probabilities underflow; inf and nan are "
                              f"no temperature), got {t}")
        if self.top_k < 0:
            raise ConfigError(f"top_k must be >= 0 (0 = off), got {self.top_k}")
        if not 0.0 < self.top_p <= 1.0:
            raise ConfigError(f"top_p must be in (0, 1], got {self.top_p}")

    @property
    def is_greedy(self) -> bool:
        return self.temperature == 0

    def logits(self, logits: torch.Tensor) -> torch.Tensor:
        """Warped logits (float32, masked entries -inf) over the last dimension."""
        import torch  # here, not at the top: the warp's checks are the config's (torch-free ``harness --help``)

        x = logits.float()
        if self.temperature not in (0.0, 1.0):
            x = x / self.temperature
        if self.top_k and self.top_k < x.size(-1):
            top = torch.topk(x, self.top_k, dim=-1)
            below = x < top.values[..., -1:]
            x = x.masked_fill(below, float("-inf"))
            if self.top_p < 1.0:
                return self._top_p_within_top_k(x, top.values, top.indices, below)
        if self.top_p < 1.0:
            sorted_x, order = torch.sort(x, dim=-1, descending=True)
            probs = torch.softmax(sorted_x, dim=-1)
            exclusive_cum = torch.cumsum(probs, dim=-1) - probs
            drop_sorted = exclusive_cum >= self.top_p
            drop_sorted[..., 0] = False
            drop = torch.zeros_like(drop_sorted).scatter(-1, order, drop_sorted)
            x = x.masked_fill(drop, float("-inf"))
        return x

    def _top_p_within_top_k(self, x: torch.Tensor, values: torch.Tensor, indices: torch.Tensor,
                            below: torch.Tensor) -> torch.Tensor:
        """Top-p after top-k without sorting the vocabulary: the same tokens as the full sort below (HF's
        ``TopPLogitsWarper``), up to the order among values tied at the k-th place, which an unstable sort leaves
        arbitrary in both. After top-k only the k largest (``values``, descending) and any ties at the k-th value
        are finite (``x``: the top-k's output, owned here; ``below``: its masked entries), so the descending order
        is: the k, then the ties (a kept entry outside the k equals the k-th value: one above it would be among the
        k). The probabilities are normalised over every finite token (``logsumexp``); a tie beyond the k, the r-th
        in vocabulary order, has exclusive cumulative probability sum(k) + r·p_k. Cost: one top-k and a few passes
        over the vocabulary instead of a full sort per row (the device tree walk warps every node with
        candidates)."""
        import torch

        probs = (values - torch.logsumexp(x, dim=-1, keepdim=True)).exp()
        cumulative = torch.cumsum(probs, dim=-1)
        drop_top = cumulative - probs >= self.top_p
        drop_top[..., 0] = False  # at least one token
        in_top = below.scatter(-1, indices, True)  # masked or among the k: not a tie
        drop = torch.zeros_like(in_top).scatter(-1, indices, drop_top)
        ties = ~in_top
        rank = torch.cumsum(ties, dim=-1) - 1
        drop |= ties & (cumulative[..., -1:] + rank * probs[..., -1:] >= self.top_p)
        return x.masked_fill_(drop, float("-inf"))

    def probs(self, logits: torch.Tensor) -> torch.Tensor:
        """T∘softmax(logits): the warped distribution (one-hot argmax when greedy)."""
        import torch

        if self.is_greedy:
            return torch.nn.functional.one_hot(logits.argmax(-1), logits.size(-1)).float()
        return torch.softmax(self.logits(logits), dim=-1)

    def as_dict(self) -> dict:
        return {"temperature": self.temperature, "top_k": self.top_k, "top_p": self.top_p}
