"""KV-cache operations on transformers 5.x ``Cache`` objects, written once for every decoder.

In the ``graphs`` execution mode (:mod:`harness.primitives.graphs`) a model's caches are
:class:`~harness.primitives.static_cache.StaticKV` (preallocated; a rollback moves the valid length or copies the
kept entries to the front, never reallocates): every operation here takes either kind.

Works across 5.x releases: ``crop`` with a negative argument removes that many tokens in
both the older (absolute-length) and newer (tokens-to-remove) API.
"""
from __future__ import annotations

import torch
from transformers import DynamicCache

from harness.primitives.graphs import graph_runner
from harness.primitives.static_cache import StaticKV


def new_cache(model) -> DynamicCache | StaticKV:
    """An empty cache for ``model``: static in graphs mode (its runner's), else transformers' dynamic one."""
    runner = graph_runner(model)
    return runner.new_cache() if runner is not None else DynamicCache(config=model.config)


def cache_length(cache) -> int:
    return 0 if cache is None else int(cache.get_seq_length())


def truncate(cache, length: int) -> None:
    """Roll the cache back to its first ``length`` positions (in place, no recompute)."""
    extra = cache_length(cache) - length
    if extra > 0:
        cache.crop(-extra)


def reorder(cache, beam_idx: torch.Tensor) -> None:
    """Select/reorder batch rows (beams) in place: row i becomes old row beam_idx[i]."""
    cache.reorder_cache(beam_idx)


def keep_positions(cache, positions: torch.Tensor) -> None:
    """Keep only the given sequence positions (sorted, 1-D) in every layer: tree-path rollback."""
    if isinstance(cache, StaticKV):
        cache.keep_positions(positions)
        return
    positions = positions.to(torch.long)
    for layer in cache.layers:
        if getattr(layer, "keys", None) is None or layer.keys.numel() == 0:
            continue
        idx = positions.to(layer.keys.device)
        layer.keys = layer.keys.index_select(-2, idx)
        layer.values = layer.values.index_select(-2, idx)


def gather_positions(cache, rows: torch.Tensor, positions: torch.Tensor) -> None:
    """Row i becomes old row ``rows[i]`` keeping only sequence positions ``positions[i]`` (B', K), in place.

    Per-row tree-path rollback of a batched cache (one tree per row, e.g. DSBD's forest, dsbd §3.3).
    """
    if isinstance(cache, StaticKV):
        cache.gather_positions(rows, positions)
        return
    for layer in cache.layers:
        if getattr(layer, "keys", None) is None or layer.keys.numel() == 0:
            continue
        r = rows.to(device=layer.keys.device, dtype=torch.long)
        pos = positions.to(device=layer.keys.device, dtype=torch.long)[:, None, :, None]
        layer.keys, layer.values = (
            t.index_select(0, r).gather(-2, pos.expand(-1, t.size(1), -1, t.size(-1)))
            for t in (layer.keys, layer.values))


def cache_bytes(cache) -> int:
    """Bytes held by the cache's key and value tensors (for memory assertions)."""
    total = 0
    for layer in getattr(cache, "layers", []):
        for t in (getattr(layer, "keys", None), getattr(layer, "values", None)):
            if t is not None:
                total += t.numel() * t.element_size()
    return total
