"""Beam distributions and the beam-extension step (dsbd §2.1 Eq. 1; mtad §2.1 Eq. 2), written once.

p_beam(x^(i)_{1:t-1}, x_t) ∝ p(x^(i)_{1:t-1}, x_t | input) over I_{t-1} × V, warped by T. Outcomes are
flat indices ``i * V + x`` into the (beams × vocab) grid.

The extension step every beam decoder runs (beam_sampling, MTJD, MTAD's draft, DSBD's forest): joint
log-probabilities of every one-token extension → choose outcomes (the top ones, or i.i.d. draws from
T∘p_beam) → parents, tokens, scores and finished flags (:func:`extend`); :class:`BeamSet` also keeps the
tokens, prefix scores and lengths, and :meth:`BeamSet.reorder` reorders a KV cache to the new beams.
"""
from __future__ import annotations

from dataclasses import dataclass
from functools import lru_cache
from typing import Callable

import torch

from harness.primitives.kv_cache import reorder
from harness.primitives.sampling import sample
from harness.primitives.warping import Warp

Choose = Callable[[torch.Tensor], torch.Tensor]  # joint log-probs (W, V) -> chosen flat outcomes (n,)


def beam_joint_logprobs(beam_logp: torch.Tensor, next_logp: torch.Tensor, finished: torch.Tensor,
                        eos_token_id: int) -> torch.Tensor:
    """log p(x^(i)_{1:t-1}, x_t) for every beam i and token x_t: (W, V). Eq. 1's numerator.

    Finished beams extend only by EOS (a pad), with conditional probability 1.
    """
    pad = _eos_only(next_logp.size(-1), eos_token_id, next_logp.dtype, str(next_logp.device))
    return beam_logp[:, None] + torch.where(finished[:, None], pad, next_logp)


@lru_cache(maxsize=32)
def _eos_only(vocab: int, eos_token_id: int, dtype: torch.dtype, device: str) -> torch.Tensor:
    """(V,) log-probabilities of a finished beam's extension: 0 at EOS (a pad), −inf elsewhere; made once per shape
    on the device (never written to)."""
    ids = torch.arange(vocab, device=device)
    return torch.where(ids == eos_token_id, 0.0, float("-inf")).to(dtype)


def beam_distribution(joint_logp: torch.Tensor, warp: Warp) -> torch.Tensor:
    """T∘p_beam over the flattened (W·V) grid of one-token extensions (Eq. 1, warped as a whole)."""
    return warp.probs(joint_logp.reshape(-1))


def sample_beams(joint_logp: torch.Tensor, warp: Warp, num: int, generator) -> tuple[torch.Tensor, torch.Tensor]:
    """Draw ``num`` beams i.i.d. from T∘p_beam (Eq. 1); returns (parent beam index, token) tensors."""
    vocab = joint_logp.size(-1)
    flat = sample(beam_distribution(joint_logp, warp), generator, num)
    return flat // vocab, flat % vocab


def sampled(warp: Warp, num: int, generator) -> Choose:
    """Choose ``num`` outcomes i.i.d. from T∘p_beam (beam sampling, Eq. 1/2)."""
    return lambda joint: sample(beam_distribution(joint, warp), generator, num)


def top(num: int) -> Choose:
    """Choose the ``num`` outcomes of highest joint likelihood (deterministic beam search)."""
    return lambda joint: torch.topk(joint.reshape(-1), min(num, joint.numel())).indices


@dataclass
class Extension:
    """Chosen one-token extensions: each one's parent beam, token, joint log-likelihood and finished flag."""

    parent: torch.Tensor
    token: torch.Tensor
    logp: torch.Tensor
    finished: torch.Tensor


def extend(joint: torch.Tensor, flat: torch.Tensor, finished: torch.Tensor, eos_token_id: int) -> Extension:
    """The extensions ``flat`` (outcome indices into ``joint`` (W, V)) of beams whose flags are ``finished``."""
    vocab = joint.size(-1)
    parent, token = flat // vocab, flat % vocab
    return Extension(parent, token, joint.reshape(-1)[flat], finished[parent] | (token == eos_token_id))


@dataclass
class BeamSet:
    """Beams of a beam decoding: generated tokens (W, t), the joint log-likelihood of every prefix
    (W, t) and of the whole beam (W,), finished flags, lengths up to and including EOS, and each
    beam's ``parent`` in the previous set (None at the start)."""

    tokens: torch.Tensor
    prefix_logp: torch.Tensor
    logp: torch.Tensor
    finished: torch.Tensor
    length: torch.Tensor
    parent: torch.Tensor | None = None

    @classmethod
    def start(cls, device) -> BeamSet:
        """One empty beam (the input): I_0 = {input}."""
        return cls(tokens=torch.empty((1, 0), dtype=torch.long, device=device),
                   prefix_logp=torch.empty((1, 0), device=device), logp=torch.zeros(1, device=device),
                   finished=torch.zeros(1, dtype=torch.bool, device=device),
                   length=torch.zeros(1, dtype=torch.long, device=device))

    def extend(self, next_logp: torch.Tensor, choose: Choose, eos_token_id: int) -> BeamSet:
        """One extension step: joint log-probs (Eq. 1's numerator) → chosen outcomes → the new beams."""
        joint = beam_joint_logprobs(self.logp, next_logp, self.finished, eos_token_id)
        ext = extend(joint, choose(joint), self.finished, eos_token_id)
        p = ext.parent
        return BeamSet(tokens=torch.cat([self.tokens[p], ext.token[:, None]], dim=1),
                       prefix_logp=torch.cat([self.prefix_logp[p], ext.logp[:, None]], dim=1), logp=ext.logp,
                       finished=ext.finished, length=self.length[p] + (~self.finished[p]).long(), parent=p)

    def reorder(self, cache) -> None:
        """Make the KV cache's rows follow the new beams (row i becomes its parent's row)."""
        reorder(cache, self.parent)

    @property
    def last_tokens(self) -> torch.Tensor:
        """(W, 1): each beam's newest token, the next forward's input."""
        return self.tokens[:, -1:]

    def best_by_perplexity(self) -> int:
        """The beam of lowest perplexity (dsbd §3.4); the first on ties."""
        return lowest_perplexity(self.logp, self.length)

    def best_by_likelihood(self) -> int:
        """The beam of highest joint likelihood."""
        return int(self.best_row())

    def best_row(self) -> torch.Tensor:
        """:meth:`best_by_likelihood` as a (1,) long tensor on the device (no host read)."""
        return torch.argmax(self.logp).reshape(1)


def lowest_perplexity(logp: torch.Tensor, length: torch.Tensor) -> int:
    """Index of the beam with the lowest perplexity exp(−logp / length) (dsbd §3.4)."""
    return int(torch.argmin(-logp / length.clamp_min(1)))
