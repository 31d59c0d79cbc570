"""Counted model calls: every decoder calls models only through :class:`CountedModel`.

Counting here (not in each decoder) makes "target forward calls" and "draft forward
calls" comparable across methods, and lets tests assert e.g. one target call per
speculative iteration.
"""
from __future__ import annotations

import torch


class CountedModel:
    """A causal LM plus a forward-call counter; returns float32 logits cut to the shared vocab."""

    def __init__(self, model, vocab_size: int):
        self.model = model
        self.vocab_size = vocab_size
        self.calls = 0

    @property
    def device(self) -> torch.device:
        return self.model.device

    @property
    def config(self):
        return self.model.config

    @torch.inference_mode()
    def __call__(self, input_ids: torch.Tensor, cache=None, *, position_ids=None, attention_mask=None,
                 all_logits: bool = True, return_hidden: bool = False):
        """One forward pass. Returns logits (B, T, V) — or (B, 1, V) for the last position only.

        ``attention_mask`` may be a 2-D padding mask or a 4-D float/bool mask (tree attention).
        ``return_hidden``: return ``(logits, hidden)`` instead, ``hidden`` (B, T, H) the last hidden
        state (after the final norm: the LM head's input) at every position fed — the same logits,
        one call (seed 003 §3.3's T1 decision model reads it).
        """
        self.calls += 1
        kwargs = {"use_cache": cache is not None}
        if cache is not None:
            kwargs["past_key_values"] = cache
        if position_ids is not None:
            kwargs["position_ids"] = position_ids
        if attention_mask is not None:
            kwargs["attention_mask"] = attention_mask
        if not all_logits:
            kwargs["logits_to_keep"] = 1
        if return_hidden:
            kwargs["output_hidden_states"] = True
        out = self.model(input_ids=input_ids, **kwargs)
        logits = out.logits[..., : self.vocab_size].float()
        return (logits, out.hidden_states[-1]) if return_hidden else logits


def synchronize(device: torch.device) -> None:
    """Wait for queued device work, so that host-side timing covers it (Spec-Bench convention). No-op on CPU."""
    if device.type == "cuda":
        torch.cuda.synchronize(device)
