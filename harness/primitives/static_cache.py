"""A static KV cache for the ``graphs`` execution mode: preallocated key/value buffers, a moving valid length.

:class:`StaticKV` is a transformers ``Cache`` whose layers hold (B, H, capacity, D) buffers allocated once per
batch size and written in place at the positions the runner puts in ``write_idx`` (a device tensor, so that a
captured CUDA graph replays the write at whatever position the cache has reached). Every layer returns its
*whole* buffer; which positions a query may see is the attention mask's business (the runner builds a 4-D mask
over the capacity: :mod:`harness.primitives.graphs`). Hence:

- ``crop`` / :func:`~harness.primitives.kv_cache.truncate` only move the valid length (``length``, a host int:
  reading it never synchronises); stale entries past it are masked out and overwritten by the next write;
- rollbacks that select positions (tree paths) or rows (beams) copy the kept entries to the front of the same
  buffers; a different batch size switches to that size's buffers (allocated on first use, then kept);
- when a forward would write past the capacity, the buffers grow (copy, once per doubling) and the runner drops
  the graphs captured on the old ones (``generation`` counts the growths).

Buffers belong to a :class:`Slot` of the model's runner: a new cache takes a free slot (one whose last cache
was dropped), so that one generation after another reuses the same buffers and the same captured graphs.
"""
from __future__ import annotations

import weakref

import torch
from transformers.cache_utils import Cache, CacheLayerMixin

GROW_STEP = 256  # capacities are multiples of this


class Slot:
    """The buffers (per batch size) a model's static caches write into, and the graphs captured on them."""

    def __init__(self, capacity: int):
        self.capacity = _round_up(capacity)
        self.buffers: dict[int, list[tuple[torch.Tensor, torch.Tensor]]] = {}  # batch -> per layer (K, V)
        self.shapes: list[tuple] | None = None  # per layer: (heads, k_dim, v_dim, dtype, device), from a first write
        self.generation = 0  # growths so far: graphs captured on an older generation are stale
        self.graphs: dict = {}  # the runner's captured graphs and static inputs on these buffers

    def ensure_capacity(self, needed: int) -> bool:
        """Grow every buffer to hold ``needed`` positions (doubling; the entries are kept). True if it grew."""
        if needed <= self.capacity:
            return False
        new = _round_up(max(needed, 2 * self.capacity))
        for batch, layers in self.buffers.items():
            self.buffers[batch] = [tuple(_grown(t, new) for t in kv) for kv in layers]
        self.capacity = new
        self.generation += 1
        self.graphs.clear()
        return True

    def layers_for(self, batch: int) -> list[tuple[torch.Tensor, torch.Tensor]] | None:
        """The buffers of batch size ``batch``, allocated now if the layer shapes are known (else None)."""
        if batch not in self.buffers and self.shapes is not None:
            self.buffers[batch] = [
                (torch.zeros(batch, h, self.capacity, kd, dtype=dt, device=dev),
                 torch.zeros(batch, h, self.capacity, vd, dtype=dt, device=dev)) for h, kd, vd, dt, dev in self.shapes]
        return self.buffers.get(batch)


def _round_up(n: int) -> int:
    return max(GROW_STEP, -(-int(n) // GROW_STEP) * GROW_STEP)


def _grown(t: torch.Tensor, capacity: int) -> torch.Tensor:
    out = t.new_zeros(*t.shape[:2], capacity, t.shape[-1])
    out[:, :, : t.size(2)] = t
    return out


class StaticLayer(CacheLayerMixin):
    """One layer of a :class:`StaticKV`: writes at ``owner.write_idx``, returns the whole buffer."""

    is_compileable = True
    is_croppable = True
    is_sliding = False

    def __init__(self, owner: StaticKV, index: int):
        super().__init__()
        self.owner, self.index = weakref.proxy(owner), index  # no cycle: a dropped cache frees its slot at once
        self.is_initialized = True

    def lazy_initialization(self, key_states, value_states) -> None:  # buffers come from the slot
        return None

    def update(self, key_states: torch.Tensor, value_states: torch.Tensor, *args, **kwargs):
        if self.keys is None:
            self.owner._first_write(self.index, key_states, value_states)
        idx = self.owner.write_idx
        self.keys.index_copy_(2, idx, key_states.to(self.keys.dtype))
        self.values.index_copy_(2, idx, value_states.to(self.values.dtype))
        return self.keys, self.values

    def get_mask_sizes(self, query_length: int) -> tuple[int, int]:
        return self.owner.slot.capacity, 0

    def get_seq_length(self) -> int:
        return self.owner.length

    def get_max_length(self) -> int:
        return self.owner.slot.capacity


class StaticKV(Cache):
    """A preallocated KV cache of one model (see the module docstring). ``length``: the valid positions."""

    def __init__(self, runner, slot: Slot, num_layers: int):
        super().__init__(layers=[StaticLayer(self, i) for i in range(num_layers)])
        self.runner, self.slot = runner, slot
        self.length = 0
        self.batch: int | None = None
        self.write_idx: torch.Tensor | None = None  # (T,) positions the next forward writes (set by the runner)
        self._generation = slot.generation

    # --- buffers -------------------------------------------------------------------------------------------
    def bind(self, batch: int) -> bool:
        """Point the layers at the slot's buffers of ``batch`` rows; False while the shapes are unknown."""
        layers = self.slot.layers_for(batch)
        self.batch = batch
        if layers is None:
            return False
        for layer, (k, v) in zip(self.layers, layers):
            layer.keys, layer.values = k, v
        self._generation = self.slot.generation
        return True

    def prepare(self, batch: int, needed: int) -> bool:
        """Before a forward of ``batch`` rows writing up to position ``needed``: grow if needed, bind the
        buffers. Returns whether the buffers exist (False: the first write allocates them)."""
        if self.length and batch != self.batch:
            raise ValueError(f"a static cache holding {self.batch} row(s) got a forward of {batch} row(s); "
                             "reorder the cache to the new rows first")
        self.slot.ensure_capacity(needed)
        return self.bind(batch) if (self.batch != batch or self._generation != self.slot.generation
                                    or self.layers[0].keys is None) else True

    def _first_write(self, index: int, key_states: torch.Tensor, value_states: torch.Tensor) -> None:
        """The first write to a fresh slot: learn every layer's shape from this one (all layers alike)."""
        if self.slot.shapes is None:
            _, heads, _, kd = key_states.shape
            shape = (heads, kd, value_states.shape[-1], key_states.dtype, key_states.device)
            self.slot.shapes = [shape] * len(self.layers)
        if not self.bind(key_states.size(0)):
            raise RuntimeError("static cache: no buffers after the first write")

    # --- the Cache API the primitives use ------------------------------------------------------------------
    def get_seq_length(self, layer_idx: int = 0) -> int:
        return self.length

    def get_max_length(self) -> int:
        return self.slot.capacity

    def crop(self, max_length: int) -> None:
        """HF's crop: a negative argument removes that many positions, a positive one keeps that many."""
        self.length = max(0, self.length + max_length) if max_length < 0 else min(self.length, max_length)

    @torch.inference_mode()
    def reorder_cache(self, beam_idx: torch.Tensor) -> None:
        """Row i becomes old row ``beam_idx[i]`` (the number of rows may change: a prompt row fans out to beams)."""
        self._select(beam_idx.to(torch.long), None)

    @torch.inference_mode()
    def keep_positions(self, positions: torch.Tensor) -> None:
        """Keep only the given sequence positions (sorted, 1-D), moved to the front: tree-path rollback."""
        rows = torch.arange(self.batch or 1, device=positions.device)
        self._select(rows, positions.to(torch.long)[None].expand(rows.numel(), -1))

    @torch.inference_mode()
    def gather_positions(self, rows: torch.Tensor, positions: torch.Tensor) -> None:
        """Row i becomes old row ``rows[i]`` keeping only positions ``positions[i]`` (B', K)."""
        self._select(rows.to(torch.long), positions.to(torch.long))

    def _select(self, rows: torch.Tensor, positions: torch.Tensor | None) -> None:
        if self.layers[0].keys is None or self.length == 0:  # nothing cached: only the row count changes
            self.batch, self.length = int(rows.numel()), 0
            return
        n = self.length if positions is None else int(positions.size(1))
        kept = []
        for layer in self.layers:
            dev = layer.keys.device
            r = rows.to(dev)
            pair = []
            for t in (layer.keys, layer.values):
                t = t.index_select(0, r)
                if positions is None:
                    pair.append(t[:, :, :n])
                else:
                    pos = positions.to(dev)[:, None, :, None].expand(-1, t.size(1), -1, t.size(-1))
                    pair.append(t.gather(2, pos))
            kept.append(pair)
        self.bind(int(rows.numel()))
        for layer, (k, v) in zip(self.layers, kept):
            layer.keys[:, :, :n].copy_(k)
            layer.values[:, :, :n].copy_(v)
        self.length = n

    def nbytes(self) -> int:
        return sum(t.numel() * t.element_size() for layer in self.layers for t in (layer.keys, layer.values)
                   if t is not None)
