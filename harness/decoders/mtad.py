"""MTAD: multi-token assisted decoding (seed 002 §3.2, App. B Algorithm 1).

One iteration (Alg. 1):

1. the draft model runs beam sampling (seed 002 Eq. 2 with q, warped by T) with ``draft_width`` beams
   for γ steps, with its KV cache; the beam of highest draft joint likelihood is the draft
   x_{1:γ}, with q_j = q(x_{1:j} | input) (line 3);
2. ONE target call scores the chain: p(x_{1:j} | input) = Π_{i ≤ j} p(x_i | x_{<i}, input) (line 4);
3. prefix x_{1:j} passes iff min(1, p(x_{1:j}) / q(x_{1:j})) > τ; the LONGEST passing prefix is
   kept, η = max{j : passes} (0 if none) — shorter prefixes need not pass (lines 6-13; line 11's
   "η ← j" stores the position i, not the token);
4. one more token is sampled from the target, T∘p(· | x_{1:η}, input) (lines 15-16).

Verification uses the models' raw (unwarped) joint likelihoods, as the paper does (§3.2 footnote 3);
sampling (draft beams, the target token) uses T. Drafts are cut after an EOS.
Table 15 defaults: γ = 4, 8 draft beams, τ = 0.1 (0.9 on Spider / MT-Bench with Llama).
"""
from __future__ import annotations

import math
from dataclasses import dataclass

import torch

from harness.decoders.base import Decoded, Decoder, SpeculativeParams, param, register
from harness.errors import ConfigError
from harness.primitives.beams import BeamSet, sampled
from harness.primitives.kv_cache import reorder
from harness.primitives.sampling import sample
from harness.primitives.spec_loop import speculative_loop, verify_chain
from harness.primitives.spec_state import DraftTree, SpeculativeCaches


@dataclass(frozen=True)
class MTADParams(SpeculativeParams):
    gamma: int = param(4, "draft length γ (Table 15: 4)")
    draft_width: int = param(8, "beams of the draft's beam sampling (Table 15: 8)")
    tau: float = param(0.1, "acceptance threshold τ in [0, 1] (Table 15: 0.1, 0.9); 1 rejects every draft")

    renamed = {"num_beams": "draft_width"}

    def __post_init__(self):
        super().__post_init__()
        self.check_at_least(1, "gamma", "draft_width")
        if not 0.0 <= self.tau <= 1.0:
            raise ConfigError(f"tau must be in [0, 1], got {self.tau}")
        self.require_sampling("mtad", "samples its draft beams")


def longest_accepted_prefix(p_joint_logp: torch.Tensor, q_joint_logp: torch.Tensor, tau: float) -> int:
    """η = max{j : min(1, p(x_{1:j}) / q(x_{1:j})) > τ}, 0 if no prefix passes (Alg. 1 lines 6-13).

    Inputs are joint log-likelihoods of the prefixes j = 1..γ; compared in log space.
    """
    log_ratio = torch.clamp(p_joint_logp - q_joint_logp, max=0.0)
    passes = log_ratio > (math.log(tau) if tau > 0 else float("-inf"))
    hits = torch.nonzero(passes).flatten()
    return int(hits[-1]) + 1 if hits.numel() else 0


@register
class MTAD(Decoder[MTADParams]):
    method = "mtad"
    decodings = ("sampling",)
    uses_draft = True
    uses_gamma_policy = True
    supports_draft_selection = True

    def _decode(self, prompt_ids, max_new_tokens, generator, stats) -> Decoded:
        caches = SpeculativeCaches(self.target, self.draft, prompt_ids, self.sync_timing)
        warp, tau = self.params.warp, self.params.tau

        def step(depth: int):
            with caches.clock.drafting():
                draft_prefix = caches.draft_prefix()
                tokens, q_joint = self._beam_draft(caches, depth, generator)
                dtree = DraftTree.chain(tokens, num_fed=min(tokens.numel(), max(depth - 1, 0)))

            def rule(logits, drafted):
                p_cond = torch.log_softmax(logits[:-1], -1).gather(1, drafted[:, None]).squeeze(1)
                eta = longest_accepted_prefix(torch.cumsum(p_cond, 0), q_joint, tau) if drafted.numel() else 0
                return eta, int(sample(warp.probs(logits[eta]), generator)[0])

            return verify_chain(self.target, caches, dtree, draft_prefix, rule)

        tokens = speculative_loop(step, self.gamma_policy, prompt_ids[0].tolist(), max_new_tokens,
                                  self.stopping, stats)
        return Decoded(tokens)

    def _beam_draft(self, caches: SpeculativeCaches, depth: int, generator):
        """Draft beam sampling for ``depth`` steps (Alg. 1 line 3). Returns the best beam's tokens (cut after
        an EOS) and its prefix joint log-likelihoods log q(x_{1:j}).

        The draft cache ends as one row: the committed sequence plus the best beam's first depth − 1 tokens.
        """
        if depth == 0:  # a plain target step: the draft does not run
            return torch.empty(0, dtype=torch.long, device=self.device), torch.empty(0, device=self.device)
        cache, eos = caches.draft_cache, self.eos_sentinel
        choose = sampled(self.params.warp, self.params.draft_width, generator)
        logits = self.draft(caches.draft_pending, cache, all_logits=False)[:, -1]
        beams = BeamSet.start(self.device)
        for d in range(depth):
            beams = beams.extend(torch.log_softmax(logits, -1), choose, eos)
            if d == depth - 1:
                break
            beams.reorder(cache)
            logits = self.draft(beams.last_tokens, cache)[:, -1]
        best = beams.best_by_likelihood()
        reorder(cache, beams.parent[best:best + 1])  # rows are the depth − 1 step's beams: keep best's ancestor
        tokens, q_joint = beams.tokens[best], beams.prefix_logp[best]
        if eos >= 0 and bool((tokens == eos).any()):
            end = int(torch.nonzero(tokens == eos)[0, 0]) + 1
            tokens, q_joint = tokens[:end], q_joint[:end]
        return tokens, q_joint
