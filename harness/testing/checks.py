"""Checks shared by the decoder tests: a KV cache after rollback equals a from-scratch forward."""
from __future__ import annotations

import copy

import torch

from harness.primitives.kv_cache import cache_length, truncate


@torch.no_grad()
def assert_cache_matches_scratch(model, cache, pending: torch.Tensor, committed: list[int]) -> None:
    """Cache + pending = committed, and the next forward equals a from-scratch forward (``model``: a
    :class:`~harness.primitives.forward.CountedModel`). An empty ``pending`` (a target-initialised round's target
    cache holds the whole committed sequence): the last committed token is re-fed to a copy."""
    if pending.size(1) == 0:
        assert cache_length(cache) == len(committed)
        cache = copy.deepcopy(cache)
        truncate(cache, len(committed) - 1)
        pending = torch.tensor([committed[-1:]])
    assert cache_length(cache) + pending.size(1) == len(committed)
    assert pending[0].tolist() == committed[len(committed) - pending.size(1):]
    probe = copy.deepcopy(cache)
    ours = model(pending, probe)[0]
    ref = model.model(input_ids=torch.tensor([committed])).logits[0, -pending.size(1):].float()
    torch.testing.assert_close(ours, ref, atol=1e-4, rtol=1e-4)
