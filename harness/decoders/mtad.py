"""MTAD: multi-token assisted decoding (seed 002 §3.2, App. B Algorithm 1).

One iteration (Alg. 1):

1. the draft model runs beam sampling (seed 002 Eq. 2 with q, warped by T) with ``num_beams`` beams
   for γ steps, with its KV cache; the beam of highest draft joint likelihood is the draft
   x_{1:γ}, with q_j = q(x_{1:j} | input) (line 3);
2. ONE target call scores the chain: p(x_{1:j} | input) = Π_{i ≤ j} p(x_i | x_{<i}, input) (line 4);
3. prefix x_{1:j} passes iff min(1, p(x_{1:j}) / q(x_{1:j})) > τ; the LONGEST passing prefix is
   kept, η = max{j : passes} (0 if none) — shorter prefixes need not pass (lines 6-13; line 11's
   "η ← j" stores the position i, not the token);
4. one more token is sampled from the target, T∘p(· | x_{1:η}, input) (lines 15-16).

Verification uses the models' raw (unwarped) joint likelihoods, as the paper does (§3.2 footnote 3);
sampling (draft beams, the target token) uses T. Drafts are cut after an EOS.
Table 15 defaults: γ = 4, 8 beams, τ = 0.1 (0.9 on Spider / MT-Bench with Llama).
"""
from __future__ import annotations

import math
from dataclasses import dataclass

import torch

from harness.decoders.ar_sampling import SamplingParams
from harness.decoders.base import Decoder, GenerationStats, register
from harness.errors import ConfigError
from harness.primitives.beams import beam_joint_logprobs, sample_beams
from harness.primitives.chain_verify import chain_draft_tree, verify_chain
from harness.primitives.kv_cache import cache_length, reorder
from harness.primitives.sampling import sample
from harness.primitives.speculative import SpeculativeCaches, speculative_loop


@dataclass(frozen=True)
class MTADParams(SamplingParams):
    gamma: int = 4  # draft length γ
    num_beams: int = 8  # beams of the draft's beam sampling
    tau: float = 0.1  # acceptance threshold τ ∈ [0, 1]; τ = 1 rejects every draft (AR sampling, §5.2.2)

    def __post_init__(self):
        super().__post_init__()
        if self.gamma < 1 or self.num_beams < 1:
            raise ConfigError(f"gamma and num_beams must be >= 1, got {self.gamma}, {self.num_beams}")
        if not 0.0 <= self.tau <= 1.0:
            raise ConfigError(f"tau must be in [0, 1], got {self.tau}")
        if self.warp.is_greedy:
            raise ConfigError("mtad samples its draft beams: it needs temperature > 0")


def longest_accepted_prefix(p_joint_logp: torch.Tensor, q_joint_logp: torch.Tensor, tau: float) -> int:
    """η = max{j : min(1, p(x_{1:j}) / q(x_{1:j})) > τ}, 0 if no prefix passes (Alg. 1 lines 6-13).

    Inputs are joint log-likelihoods of the prefixes j = 1..γ; compared in log space.
    """
    log_ratio = torch.clamp(p_joint_logp - q_joint_logp, max=0.0)
    passes = log_ratio > (math.log(tau) if tau > 0 else float("-inf"))
    hits = torch.nonzero(passes).flatten()
    return int(hits[-1]) + 1 if hits.numel() else 0


@register
class MTAD(Decoder):
    method = "mtad"
    Params = MTADParams
    uses_draft = True

    def _decode(self, prompt_ids, max_new_tokens, generator, stats: GenerationStats) -> list[int]:
        caches = SpeculativeCaches(self.target, self.draft, prompt_ids)

        def step(depth: int):
            tokens, q_joint, draft_prefix = self._beam_draft(caches, depth, generator)

            def rule(logits, drafted):
                p_cond = torch.log_softmax(logits[:-1], -1).gather(1, drafted[:, None]).squeeze(1)
                eta = longest_accepted_prefix(torch.cumsum(p_cond, 0), q_joint, self.params.tau)
                return eta, int(sample(self.params.warp.probs(logits[eta]), generator)[0])

            dtree = chain_draft_tree(tokens, num_fed=min(tokens.numel(), depth - 1))
            return verify_chain(self.target, caches, dtree, draft_prefix, rule, self.device)

        return speculative_loop(step, self.params.gamma, max_new_tokens, self.eos_token_id, stats)

    def _beam_draft(self, caches: SpeculativeCaches, depth: int, generator):
        """Draft beam sampling for ``depth`` steps (Alg. 1 line 3). Returns the best beam's tokens, its
        prefix joint log-likelihoods log q(x_{1:j}), and the draft cache length before the chain.

        The draft cache ends as one row: the committed sequence plus the best beam's first depth − 1 tokens.
        """
        cache, warp = caches.draft_cache, self.params.warp
        eos = -1 if self.eos_token_id is None else int(self.eos_token_id)
        logits = self.draft(caches.draft_pending, cache, all_logits=False)[:, -1]
        draft_prefix = cache_length(cache)
        beam_logp = torch.zeros(1, device=self.device)
        finished = torch.zeros(1, dtype=torch.bool, device=self.device)
        seqs = torch.empty((1, 0), dtype=torch.long, device=self.device)
        prefix_logp = torch.empty((1, 0), device=self.device)
        for d in range(depth):
            joint = beam_joint_logprobs(beam_logp, torch.log_softmax(logits, -1), finished, eos)
            parent, token = sample_beams(joint, warp, self.params.num_beams, generator)
            beam_logp = joint[parent, token]
            finished = finished[parent] | (token == eos)
            seqs = torch.cat([seqs[parent], token[:, None]], dim=1)
            prefix_logp = torch.cat([prefix_logp[parent], beam_logp[:, None]], dim=1)
            if d == depth - 1:
                break
            reorder(cache, parent)
            logits = self.draft(token[:, None], cache)[:, -1]
        best = int(torch.argmax(beam_logp))
        reorder(cache, parent[best:best + 1])  # rows are the depth − 1 step's beams: keep best's ancestor
        tokens, q_joint = seqs[best], prefix_logp[best]
        if eos >= 0 and bool((tokens == eos).any()):
            end = int(torch.nonzero(tokens == eos)[0, 0]) + 1
            tokens, q_joint = tokens[:end], q_joint[:end]
        return tokens, q_joint, draft_prefix
