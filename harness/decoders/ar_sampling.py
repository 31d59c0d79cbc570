"""Autoregressive multinomial sampling: x_t ~ T∘p(· | x_<t) (seed 002 §2.1).

T is temperature → top-k → top-p (seed 002 App. F: top-20 then top-p 0.9; seed 000 §4.1
uses k=10, p=0.8). Same distribution as HF ``generate(do_sample=True)`` with the same
warpers; checked statistically against the exact warped distribution on a toy model.
"""
from __future__ import annotations

from dataclasses import dataclass

import torch

from harness.decoders.base import Decoder, GenerationStats, register
from harness.primitives.kv_cache import new_cache
from harness.primitives.sampling import sample
from harness.primitives.warping import Warp


@dataclass(frozen=True)
class SamplingParams:
    temperature: float = 1.0
    top_k: int = 20
    top_p: float = 0.9

    @property
    def warp(self) -> Warp:
        return Warp(self.temperature, self.top_k, self.top_p)

    def __post_init__(self):
        self.warp  # validates ranges  # noqa: B018


@register
class ArSampling(Decoder):
    method = "ar_sampling"
    Params = SamplingParams

    def _decode(self, prompt_ids, max_new_tokens, generator, stats: GenerationStats) -> list[int]:
        warp = self.params.warp
        cache = new_cache(self.target.model)
        logits = self.target(prompt_ids, cache, all_logits=False)
        out: list[int] = []
        while len(out) < max_new_tokens:
            token = int(sample(warp.probs(logits[0, -1]), generator)[0])
            out.append(token)
            if token == self.eos_token_id or len(out) == max_new_tokens:
                break
            logits = self.target(torch.tensor([[token]], device=self.device), cache)
        return out
