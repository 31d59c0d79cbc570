"""Counted model calls: every decoder calls models only through :class:`CountedModel`.

Counting here (not in each decoder) makes "target forward calls" and "draft forward
calls" comparable across methods, and lets tests assert e.g. one target call per
speculative iteration.
"""
from __future__ import annotations

import time

import torch

from harness.primitives.static_cache import StaticKV


class CountedModel:
    """A causal LM plus a forward-call counter; returns float32 logits cut to the shared vocab.

    Every call's (start, end) ``time.perf_counter`` span is appended to ``spans`` (the decoder resets it
    per generation: prefill = the first call, energy attribution by model); with ``sync`` the device is
    synchronised before and after each call (``runner.breakdown``), so that on a GPU the span covers the
    call's device work and nothing else's; without it the spans are host time (a no-op on CPU).
    """

    def __init__(self, model, vocab_size: int, sync: bool = False):
        self.model = model
        self.vocab_size = vocab_size
        self.calls = 0
        self.sync = sync
        self.spans: list[tuple[float, float]] = []
        self.cache_kwarg = cache_kwarg(model)

    @property
    def device(self) -> torch.device:
        return self.model.device

    @property
    def config(self):
        return self.model.config

    @torch.inference_mode()
    def __call__(self, input_ids: torch.Tensor, cache=None, *, position_ids=None, attention_mask=None,
                 all_logits: bool = True, keep: int | None = None, return_hidden: bool = False):
        """One forward pass. Returns logits (B, T, V) — or (B, 1, V) for the last position only.

        ``attention_mask`` may be a 2-D padding mask or a 4-D float/bool mask (tree attention).
        ``keep``: logits of the last ``keep`` positions only (HF ``logits_to_keep``; the LM head is
        skipped elsewhere); ``all_logits=False`` is ``keep=1``.
        ``return_hidden``: return ``(logits, hidden)`` instead, ``hidden`` (B, T, H) the last hidden
        state (after the final norm: the LM head's input) at every position fed — the same logits,
        one call (mcsd §3.3's T1 decision model reads it).
        A :class:`~harness.primitives.static_cache.StaticKV` cache (``pair.execution=graphs``) sends the forward
        to its model's graphs runner (:mod:`harness.primitives.graphs`): the same arguments, the same results.
        """
        self.calls += 1
        if self.sync:
            synchronize(self.device)
        start = time.perf_counter()
        if isinstance(cache, StaticKV):
            logits, hidden = cache.runner.forward(
                input_ids, cache, position_ids=position_ids, attention_mask=attention_mask, return_hidden=return_hidden,
                keep=None if all_logits and keep is None else (1 if keep is None else int(keep)))
            return self._finish(logits, hidden, start, return_hidden)
        kwargs = {"use_cache": cache is not None}
        if cache is not None:
            kwargs[self.cache_kwarg] = cache
        if position_ids is not None:
            kwargs["position_ids"] = position_ids
        if attention_mask is not None:
            kwargs["attention_mask"] = attention_mask
        if not all_logits or keep is not None:
            kwargs["logits_to_keep"] = 1 if keep is None else int(keep)
        if return_hidden:
            kwargs["output_hidden_states"] = True
        out = self.model(input_ids=input_ids, **kwargs)
        return self._finish(out.logits, out.hidden_states[-1] if return_hidden else None, start, return_hidden)

    def _finish(self, logits, hidden, start: float, return_hidden: bool):
        logits = logits[..., : self.vocab_size].float()
        if self.sync:
            synchronize(self.device)
        self.spans.append((start, time.perf_counter()))
        return (logits, hidden) if return_hidden else logits


class CountedHead:
    """A trained draft head (a torch module that is no causal LM: Medusa's heads, EAGLE's layer) with
    :class:`CountedModel`'s counter and spans: a draft-free method's head calls are its draft calls, timed and
    attributed as drafting (heads-design item 6). ``module`` is the head itself; calling this counts one call.

    In the ``graphs`` execution mode (``runner``: the head's :class:`~harness.primitives.graphs.GraphRunner`, set by
    its decoder per generation) a call on a static cache (``cache=`` a :class:`StaticKV`, EAGLE's head; its other
    keyword tensors are per-position inputs) goes to the runner's bucketed :meth:`~harness.primitives.graphs.
    GraphRunner.step`, a cacheless positional call (Medusa's heads) to its fixed-shape :meth:`~harness.primitives.
    graphs.GraphRunner.call`: the same results, captured per shape on CUDA."""

    def __init__(self, module, sync: bool = False):
        self.module = module
        self.calls = 0
        self.sync = sync
        self.spans: list[tuple[float, float]] = []
        self.runner = None  # the head's graphs runner in graphs mode, else None (eager)

    @torch.no_grad()
    def __call__(self, *args, **kwargs):
        self.calls += 1
        device = next(self.module.parameters()).device
        if self.sync:
            synchronize(device)
        start = time.perf_counter()
        cache = kwargs.get("cache")
        if isinstance(cache, StaticKV):
            inputs = {k: v for k, v in kwargs.items() if k not in ("cache", "position_ids", "attention_mask")}
            out = cache.runner.step(inputs, cache, position_ids=kwargs.get("position_ids"),
                                    attention_mask=kwargs.get("attention_mask"))[0]
        elif self.runner is not None and not kwargs:
            out = self.runner.call(*args)
        else:
            out = self.module(*args, **kwargs)
        if self.sync:
            synchronize(device)
        self.spans.append((start, time.perf_counter()))
        return out


def cache_kwarg(model) -> str:
    """The keyword a model's forward takes its KV cache by: ``cache`` (transformers >= 5.24, which warns that
    ``past_key_values`` goes away in 5.40), else ``past_key_values`` (earlier releases of the allowed range)."""
    import inspect

    forward = getattr(model, "forward", None)
    try:
        params = inspect.signature(forward).parameters if forward is not None else {}
    except (TypeError, ValueError):
        params = {}
    return "cache" if "cache" in params else "past_key_values"


def with_cache(model, cache) -> dict:
    """The keyword arguments that hand ``cache`` to ``model``'s forward (``model(ids, **with_cache(model, c))``),
    by the keyword this transformers takes (:func:`cache_kwarg`): the one call for code outside
    :class:`CountedModel` (training scripts, tools), so none hands it over by the deprecated ``past_key_values`` keyword."""
    return {cache_kwarg(model): cache, "use_cache": True}


def synchronize(device: torch.device) -> None:
    """Wait for queued device work, so that host-side timing covers it (Spec-Bench convention). No-op on CPU."""
    if device.type == "cuda":
        torch.cuda.synchronize(device)
