"""Autoregressive greedy decoding: x_t = argmax p(· | x_<t) — one target call per token.

Token-identical to HF ``generate(do_sample=False)`` (tested on the tiny pair). As HF's loop, one host-device
synchronisation per token: the chosen token stays on the device as the next forward's input and is read once
(for the stopping check and the output).
"""
from __future__ import annotations

from harness.decoders.base import DecodeRequest, Decoded, Decoder, DecoderParams, register
from harness.primitives.kv_cache import new_cache


@register
class ArGreedy(Decoder[DecoderParams]):
    method = "ar_greedy"
    decodings = ("greedy",)
    lossless = True

    def _decode(self, request: DecodeRequest) -> Decoded:
        cache = new_cache(self.target.model)
        logits = self.target(request.prompt_ids, cache, all_logits=False)
        out: list[int] = []
        while len(out) < request.max_new_tokens:
            next_ids = logits[0, -1:].argmax(-1, keepdim=True)  # (1, 1), on the device
            token = int(next_ids)  # the token's one read
            end = request.stop.cut(out, [token])  # EOS or a stop string
            out.append(token)
            if end is not None or len(out) == request.max_new_tokens:
                break
            logits = self.target(next_ids, cache)
        return Decoded(out)
