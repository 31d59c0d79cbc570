"""Autoregressive multinomial sampling: x_t ~ T∘p(· | x_<t) (mtad §2.1).

T is temperature → top-k → top-p (mtad App. F: top-20 then top-p 0.9; dsbd §4.1
uses k=10, p=0.8). Same distribution as HF ``generate(do_sample=True)`` with the same
warpers; checked statistically against the exact warped distribution on a toy model.
"""
from __future__ import annotations

from harness.decoders.base import DecodeRequest, Decoded, Decoder, SamplingParams, register
from harness.primitives.kv_cache import new_cache
from harness.primitives.sampling import sample

__all__ = ["ArSampling", "SamplingParams"]


@register
class ArSampling(Decoder[SamplingParams]):
    method = "ar_sampling"
    lossless = True

    def _decode(self, request: DecodeRequest) -> Decoded:
        warp = self.params.warp
        cache = new_cache(self.target.model)
        logits = self.target(request.prompt_ids, cache, all_logits=False)
        out: list[int] = []
        while len(out) < request.max_new_tokens:
            next_ids = sample(warp.probs(logits[0, -1:]), request.generator)  # (1, 1), on the device
            token = int(next_ids)  # the token's one read (as ar_greedy)
            end = request.stop.cut(out, [token])  # EOS or a stop string
            out.append(token)
            if end is not None or len(out) == request.max_new_tokens:
                break
            logits = self.target(next_ids, cache)
        return Decoded(out)
