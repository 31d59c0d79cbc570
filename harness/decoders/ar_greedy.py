"""Autoregressive greedy decoding: x_t = argmax p(· | x_<t) — one target call per token.

Token-identical to HF ``generate(do_sample=False)`` (tested on the tiny pair).
"""
from __future__ import annotations

import torch

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
            token = int(logits[0, -1].argmax())
            end = request.stop.cut(out, [token])  # EOS or a stop string
            out.append(token)
            if end is not None or len(out) == request.max_new_tokens:
                break
            logits = self.target(torch.tensor([[token]], device=self.device), cache)
        return Decoded(out)
