"""MTJD: multi-token joint decoding with γ_i = γ (mtad §3.1, Definition 3.1; Fig. 1; App. C.1).

Each step picks the next γ tokens by their JOINT likelihood p(x_{t+1:t+γ} | x_{1:t}) under the
target. The exact arg max costs |V|^γ, so, as in the paper, a target-model beam decoding over γ
tokens approximates it, following the decoding: deterministic beam search (top W by joint
likelihood; greedy MTJD, Corollary 3.3) under decoding=greedy, beam sampling (Eq. 2 with T; the
paper's Fig. 1 wording) under decoding=sampling. The beam of highest joint likelihood is committed,
its cache row kept, and the next step starts from it. A slow, target-only quality reference for
MTAD (which approximates MTJD with a draft model).

Statistics: a round is one joint step (γ tokens, no draft: ``gamma`` 0 in the round record, so the
draft counts stay 0); ``accept_lengths`` are the tokens each step committed.
"""
from __future__ import annotations

import torch

from harness.decoders.base import DecodeRequest, Decoded, Decoder, register
from harness.decoders.params.mtjd import MTJDParams
from harness.primitives.beams import BeamSet, sampled, top
from harness.primitives.kv_cache import new_cache, reorder
from harness.primitives.round import Round


@register
class MTJD(Decoder[MTJDParams]):
    method = "mtjd"
    in_default_sweep = False  # a slow, target-only quality reference

    def _decode(self, request: DecodeRequest) -> Decoded:
        eos, W, max_new_tokens = self.eos_sentinel, self.params.width, request.max_new_tokens
        choose = top(W) if self.params.warp.is_greedy else sampled(self.params.warp, W, request.generator)
        cache = new_cache(self.target.model)
        pending = request.prompt_ids  # committed tokens not yet in the cache
        out: list[int] = []
        rounds: list[Round] = []
        while len(out) < max_new_tokens:
            k = min(self.params.gamma, max_new_tokens - len(out))
            logits = self.target(pending, cache, all_logits=False)[:, -1]
            beams = BeamSet.start(self.device)
            for d in range(k):
                beams = beams.extend(torch.log_softmax(logits, -1), choose, eos)
                if d == k - 1:
                    break
                beams.reorder(cache)
                logits = self.target(beams.last_tokens, cache)[:, -1]
            best = beams.best_row()  # arg max of the joint likelihood among the beams, on the device
            reorder(cache, beams.parent.index_select(0, best))
            best_tokens = beams.tokens.index_select(0, best)  # (1, k)
            chunk = best_tokens[0].tolist()  # the joint step's one read
            end = request.stop.cut(out, chunk)  # EOS or a stop string ends the joint step's block
            chunk = chunk[:end] if end is not None else chunk
            out += chunk
            rounds.append(Round(tuple(chunk), gamma=0, accepted=0, draft_nodes=0))
            if end is not None:
                break
            pending = best_tokens[:, -1:]
        return Decoded(out[:max_new_tokens], rounds=rounds)
