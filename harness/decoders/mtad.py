"""MTAD: multi-token assisted decoding (mtad §3.2, App. B Algorithm 1).

One iteration (Alg. 1):

1. the draft model runs beam sampling (mtad Eq. 2 with q, warped by T) with ``draft_width`` beams
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

import torch

from harness.decoders.base import register
from harness.decoders.params.mtad import MTADParams
from harness.decoders.speculative import SpeculativeDecoder
from harness.primitives.acceptance import mtad_rule, parameterised
from harness.primitives.beams import BeamSet, sampled
from harness.primitives.kv_cache import reorder
from harness.primitives.spec_loop import ChainAcceptance
from harness.primitives.spec_state import DraftTree, SpeculativeCaches


@register
class MTAD(SpeculativeDecoder[MTADParams]):
    method = "mtad"
    decodings = ("sampling",)

    def acceptance(self, spec):
        return ChainAcceptance(parameterised(mtad_rule, tau=self.params.tau))

    def propose(self, spec, depth):
        tokens, q_joint = self._beam_draft(spec.caches, depth, spec.generator)
        return DraftTree.chain(tokens, num_fed=min(tokens.numel(), max(depth - 1, 0)), joint_logq=q_joint)

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
        best = beams.best_row()  # on the device: nothing read here
        reorder(cache, beams.parent.index_select(0, best))  # rows are the depth − 1 step's beams: keep best's ancestor
        tokens, q_joint = beams.tokens.index_select(0, best)[0], beams.prefix_logp.index_select(0, best)[0]
        if eos >= 0 and bool((tokens == eos).any()):
            end = int(torch.nonzero(tokens == eos)[0, 0]) + 1
            tokens, q_joint = tokens[:end], q_joint[:end]
        return tokens, q_joint
