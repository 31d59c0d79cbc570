"""Stochastic beam sampling (dsbd §2.1 Eq. 1; mtad §2.1 Eq. 2).

At each step the W next beams are drawn i.i.d. from T∘p_beam, where
p_beam(x^(i)_{1:t-1}, x_t) ∝ p(x^(i)_{1:t-1}, x_t | input) over I_{t-1} × V: the joint
likelihood of every one-token extension of every kept beam, normalised; T (temperature,
top-k, top-p) warps that joint distribution. Draws are with replacement, matching the
i.i.d. statement of dsbd Theorem 3.1. A beam that produced EOS is finished: its only
extension is itself with probability 1, so its joint likelihood carries on unchanged.
The returned output is the beam with the lowest perplexity (dsbd §3.4); ``Generation.beams``
holds every final beam. The dsbd paper's warp (§4.1: top-k 10, top-p 0.8) is ``decoding=sampling_dsbd``.
"""
from __future__ import annotations

import torch

from harness.decoders.base import Beam, DecodeRequest, Decoded, Decoder, register
from harness.decoders.params.beam_sampling import BeamSamplingParams
from harness.primitives.beams import BeamSet, sampled
from harness.primitives.kv_cache import new_cache


@register
class BeamSampling(Decoder[BeamSamplingParams]):
    method = "beam_sampling"
    decodings = ("sampling",)

    def _decode(self, request: DecodeRequest) -> Decoded:
        prompt_ids, max_new_tokens, stopping = request.prompt_ids, request.max_new_tokens, request.stop
        choose = sampled(self.params.warp, self.params.width, request.generator)
        cache = new_cache(self.target.model)
        logits = self.target(prompt_ids, cache, all_logits=False)[:, -1]  # one input beam: I_0 = {input}
        beams = BeamSet.start(self.device)
        for _ in range(max_new_tokens):
            beams = beams.extend(torch.log_softmax(logits, -1), choose, self.eos_sentinel)
            if stopping.stop_strings:  # a beam that completes a stop string is finished, like one at EOS
                rows = [t[:n] for t, n in zip(beams.tokens.tolist(), beams.length.tolist())]
                beams.finished = beams.finished | torch.tensor(stopping.rows_stopped(rows), device=self.device)
            if bool(beams.finished.all()) or beams.tokens.size(1) == max_new_tokens:
                break
            beams.reorder(cache)  # also expands the single prompt row to W rows on the first step
            logits = self.target(beams.last_tokens, cache)[:, -1]
        final = Beam.by_perplexity(beams.tokens, beams.logp, beams.length)  # lowest perplexity first, first on ties
        return Decoded(list(final[0].tokens), beams=final)
