"""Stochastic beam sampling (seed 000 §2.1 Eq. 1; seed 002 §2.1 Eq. 2).

At each step the W next beams are drawn i.i.d. from T∘p_beam, where
p_beam(x^(i)_{1:t-1}, x_t) ∝ p(x^(i)_{1:t-1}, x_t | input) over I_{t-1} × V: the joint
likelihood of every one-token extension of every kept beam, normalised; T (temperature,
top-k, top-p) warps that joint distribution. Draws are with replacement, matching the
i.i.d. statement of seed 000 Theorem 3.1. A beam that produced EOS is finished: its only
extension is itself with probability 1, so its joint likelihood carries on unchanged.
The returned output is the beam with the lowest perplexity (seed 000 §3.4).
"""
from __future__ import annotations

from dataclasses import dataclass

import torch

from harness.decoders.base import Decoder, GenerationStats, register
from harness.errors import ConfigError
from harness.primitives.beams import beam_joint_logprobs, sample_beams
from harness.primitives.kv_cache import new_cache, reorder
from harness.primitives.warping import Warp


@dataclass(frozen=True)
class BeamSamplingParams:
    width: int = 4
    temperature: float = 1.0
    top_k: int = 10
    top_p: float = 0.8

    @property
    def warp(self) -> Warp:
        return Warp(self.temperature, self.top_k, self.top_p)

    def __post_init__(self):
        if self.width < 1:
            raise ConfigError(f"beam width must be >= 1, got {self.width}")
        if self.warp.is_greedy:
            raise ConfigError("beam_sampling needs temperature > 0; for deterministic beams use method=beam_search")


@register
class BeamSampling(Decoder):
    method = "beam_sampling"
    Params = BeamSamplingParams

    def _decode(self, prompt_ids, max_new_tokens, generator, stats: GenerationStats) -> list[int]:
        W, warp, eos = self.params.width, self.params.warp, self.eos_token_id
        dev = self.device
        cache = new_cache(self.target.model)
        logits = self.target(prompt_ids, cache, all_logits=False)[:, -1]  # one input beam: I_0 = {input}
        beam_logp = torch.zeros(1, device=dev)
        beams = torch.empty((1, 0), dtype=torch.long, device=dev)
        finished = torch.zeros(1, dtype=torch.bool, device=dev)
        lengths = torch.zeros(1, dtype=torch.long, device=dev)
        for _ in range(max_new_tokens):
            joint = beam_joint_logprobs(beam_logp, torch.log_softmax(logits, -1), finished, eos)
            parent, token = sample_beams(joint, warp, W, generator)
            beam_logp = joint[parent, token]
            lengths = lengths[parent] + (~finished[parent]).long()
            finished = finished[parent] | (token == eos)
            beams = torch.cat([beams[parent], token[:, None]], dim=1)
            if bool(finished.all()) or beams.size(1) == max_new_tokens:
                break
            reorder(cache, parent)  # also expands the single prompt row to W rows on the first step
            logits = self.target(token[:, None], cache)[:, -1]
        ppl_order = -beam_logp / lengths.clamp_min(1)
        best = int(torch.argmin(ppl_order))
        out = beams[best, : int(lengths[best])].tolist()
        stats.extra["beam_width"] = W
        return out
