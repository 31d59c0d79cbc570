"""Sampling from distributions, and the residual distribution of speculative sampling."""
from __future__ import annotations

import torch

from harness.primitives.device import make_generator  # noqa: F401 — its old home; defined in primitives.device


def sample(probs: torch.Tensor, generator: torch.Generator | None, num_samples: int = 1) -> torch.Tensor:
    """Draw token ids from ``probs`` (..., V) with replacement; returns (..., num_samples)."""
    if probs.dim() == 1:  # the same draws as its one-row view, without the reshapes
        return torch.multinomial(probs, num_samples, replacement=True, generator=generator)
    flat = probs.reshape(-1, probs.size(-1))
    out = torch.multinomial(flat, num_samples, replacement=True, generator=generator)
    return out.reshape(*probs.shape[:-1], num_samples)


def residual(p: torch.Tensor, q: torch.Tensor) -> torch.Tensor:
    """norm(max(0, p − q)) (Leviathan et al. 2023, Alg. 1; dsbd §2.2 step 3).

    Where p ≤ q everywhere (p == q up to rounding) the residual is undefined; then p itself
    is returned, which is what the rejection never reaches with positive probability.
    """
    r = (p - q).clamp_(min=0.0)
    total = r.sum(-1, keepdim=True)
    return torch.where(total > 0, r.div_(total.clamp_min(1e-30)), p)

