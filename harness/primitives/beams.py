"""Beam distributions (seed 000 §2.1 Eq. 1; seed 002 §2.1 Eq. 2), written once for every beam decoder.

p_beam(x^(i)_{1:t-1}, x_t) ∝ p(x^(i)_{1:t-1}, x_t | input) over I_{t-1} × V, warped by T. Outcomes are
flat indices ``i * V + x`` into the (beams × vocab) grid.
"""
from __future__ import annotations

import torch

from harness.primitives.sampling import sample
from harness.primitives.warping import Warp


def beam_joint_logprobs(beam_logp: torch.Tensor, next_logp: torch.Tensor, finished: torch.Tensor,
                        eos_token_id: int) -> torch.Tensor:
    """log p(x^(i)_{1:t-1}, x_t) for every beam i and token x_t: (W, V). Eq. 1's numerator.

    Finished beams extend only by EOS (a pad), with conditional probability 1.
    """
    cond = next_logp.clone()
    if finished.any():
        cond[finished] = float("-inf")
        cond[finished, eos_token_id] = 0.0
    return beam_logp[:, None] + cond


def beam_distribution(joint_logp: torch.Tensor, warp: Warp) -> torch.Tensor:
    """T∘p_beam over the flattened (W·V) grid of one-token extensions (Eq. 1, warped as a whole)."""
    return warp.probs(joint_logp.reshape(-1))


def sample_beams(joint_logp: torch.Tensor, warp: Warp, num: int, generator) -> tuple[torch.Tensor, torch.Tensor]:
    """Draw ``num`` beams i.i.d. from T∘p_beam (Eq. 1); returns (parent beam index, token) tensors."""
    vocab = joint_logp.size(-1)
    flat = sample(beam_distribution(joint_logp, warp), generator, num)
    return flat // vocab, flat % vocab
