"""Prompt lookup decoding (Saxena 2023, apoorvumang/prompt-lookup-decoding; HF transformers'
``prompt_lookup_num_tokens``): no draft model — the draft is copied from the text itself.

Each round the last n tokens of the committed sequence (prompt and output so far) are looked up in that
sequence, n from ``max_matching_ngram_size`` down to 1; at the first size with an earlier occurrence, the
leftmost one wins and the (up to) ``prompt_lookup_num_tokens`` tokens that followed it are the round's
draft, cut before an EOS among them; no occurrence at any size: the round is one plain target step. This is
exactly HF's ``PromptLookupCandidateGenerator`` (transformers 5.x, ``get_candidates``: ``unfold`` windows,
sizes from the largest down, the first match left to right whose continuation is non-empty), so greedy
outputs and rounds are HF's (``hf_assisted`` with ``prompt_lookup_num_tokens``); here the occurrences are
kept in an index updated with each round's tokens instead of rescanning the sequence.

The target verifies the draft in ONE forward; the drafts are deterministic (a point mass each), so the
point-mass rule (:func:`~harness.primitives.acceptance.point_mass_chain`: x accepted with probability p̃(x),
else a token from p̃ without x) keeps the output exactly AR sampling's; greedy: the target's argmax, AR's
tokens. The lookup length is a cap, not a drafting cost, so there is no γ policy (as in HF).
"""
from __future__ import annotations

import torch

from harness.decoders.base import register
from harness.decoders.params.pld import PLDParams
from harness.decoders.speculative import DraftFreeDecoder
from harness.primitives.acceptance import point_mass_chain
from harness.primitives.spec_loop import ChainAcceptance
from harness.primitives.spec_state import DraftTree


class NgramIndex:
    """The first occurrence (start position) of every n-gram, n = 1..``max_n``, of a growing token sequence."""

    def __init__(self, max_n: int):
        self.max_n = max_n
        self.first: dict[tuple[int, ...], int] = {}
        self.seen = 0  # tokens indexed so far

    def update(self, seq: list[int]) -> None:
        """Index the n-grams ending at the tokens appended since the last call."""
        first = self.first
        for end in range(self.seen + 1, len(seq) + 1):
            for n in range(1, min(self.max_n, end) + 1):
                first.setdefault(tuple(seq[end - n:end]), end - n)
        self.seen = len(seq)

    def lookup(self, seq: list[int], num: int, eos: int | None) -> list[int]:
        """HF's candidates: after the leftmost earlier occurrence of the longest matching suffix n-gram, up to
        ``num`` tokens, cut before the first ``eos``; [] without a match (a cut to nothing stays a match)."""
        length = len(seq)
        for n in range(min(self.max_n, length - 1), 0, -1):
            start = self.first.get(tuple(seq[length - n:]))
            if start is not None and start + n < length:  # not just the suffix itself
                out = seq[start + n:start + n + num]
                return out[:out.index(eos)] if eos is not None and eos in out else out
        return []


@register
class PromptLookupDecoding(DraftFreeDecoder[PLDParams]):
    method = "pld"
    lossless = True
    accept = ChainAcceptance(point_mass_chain)

    def begin(self, spec) -> None:
        spec.state = NgramIndex(self.params.max_matching_ngram_size)

    def propose(self, spec, depth: int) -> DraftTree:
        index: NgramIndex = spec.state
        index.update(spec.tokens)
        tokens = index.lookup(spec.tokens, depth, self.eos_token_id) if depth else []
        return DraftTree.chain(torch.tensor(tokens, dtype=torch.long, device=spec.caches.target_pending.device), num_fed=0)
