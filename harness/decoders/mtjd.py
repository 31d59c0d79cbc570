"""MTJD: multi-token joint decoding with γ_i = K (seed 002 §3.1, Definition 3.1; Fig. 1; App. C.1).

Each step picks the next K tokens by their JOINT likelihood p(x_{t+1:t+K} | x_{1:t}) under the
target. The exact arg max costs |V|^K, so, as in the paper, a target-model beam decoding over K
tokens approximates it: deterministic beam search (top W by joint likelihood, the default) or
beam sampling (Eq. 2 with T, ``sample=True``; the paper's Fig. 1 wording). The beam of highest
joint likelihood is committed, its cache row kept, and the next step starts from it. A slow,
target-only quality reference for MTAD (which approximates MTJD with a draft model).
"""
from __future__ import annotations

from dataclasses import dataclass

import torch

from harness.decoders.ar_sampling import SamplingParams
from harness.decoders.base import Decoder, GenerationStats, register
from harness.errors import ConfigError
from harness.primitives.beams import beam_joint_logprobs, sample_beams
from harness.primitives.kv_cache import new_cache, reorder


@dataclass(frozen=True)
class MTJDParams(SamplingParams):
    k: int = 4  # tokens per step, γ_i = K (App. C.1 uses K = 4)
    num_beams: int = 4
    sample: bool = False  # False: beam search (top W); True: beam sampling with T (temperature, top_k, top_p)

    def __post_init__(self):
        super().__post_init__()
        if self.k < 1 or self.num_beams < 1:
            raise ConfigError(f"k and num_beams must be >= 1, got {self.k}, {self.num_beams}")
        if self.sample and self.warp.is_greedy:
            raise ConfigError("mtjd with sample=true needs temperature > 0 (or set sample=false)")


@register
class MTJD(Decoder):
    method = "mtjd"
    Params = MTJDParams

    def _decode(self, prompt_ids, max_new_tokens, generator, stats: GenerationStats) -> list[int]:
        eos = -1 if self.eos_token_id is None else int(self.eos_token_id)
        W, warp = self.params.num_beams, self.params.warp
        cache = new_cache(self.target.model)
        pending = prompt_ids  # committed tokens not yet in the cache
        out: list[int] = []
        while len(out) < max_new_tokens:
            k = min(self.params.k, max_new_tokens - len(out))
            logits = self.target(pending, cache, all_logits=False)[:, -1]
            beam_logp = torch.zeros(1, device=self.device)
            finished = torch.zeros(1, dtype=torch.bool, device=self.device)
            seqs = torch.empty((1, 0), dtype=torch.long, device=self.device)
            for d in range(k):
                joint = beam_joint_logprobs(beam_logp, torch.log_softmax(logits, -1), finished, eos)
                if self.params.sample:
                    parent, token = sample_beams(joint, warp, W, generator)
                else:
                    flat = torch.topk(joint.reshape(-1), min(W, joint.numel())).indices
                    parent, token = flat // joint.size(-1), flat % joint.size(-1)
                beam_logp = joint[parent, token]
                finished = finished[parent] | (token == eos)
                seqs = torch.cat([seqs[parent], token[:, None]], dim=1)
                if d == k - 1:
                    break
                reorder(cache, parent)
                logits = self.target(token[:, None], cache)[:, -1]
            best = int(torch.argmax(beam_logp))  # arg max of the joint likelihood among the beams
            reorder(cache, parent[best:best + 1])
            chunk = seqs[best].tolist()
            ended = eos in chunk
            chunk = chunk[: chunk.index(eos) + 1] if ended else chunk
            out += chunk
            stats.iterations += 1
            stats.accept_lengths.append(len(chunk))
            if ended:
                break
            pending = seqs[best, -1:][None]
        return out[:max_new_tokens]
