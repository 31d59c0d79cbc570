"""The ``graphs`` execution mode: static KV caches, shape buckets, and CUDA graphs captured once per shape.

``pair.execution`` names how a pair's models run: ``eager`` (the default: transformers' ``DynamicCache``, one
kernel launch per op) or ``graphs``. :func:`set_execution` attaches a :class:`GraphRunner` to a model; from then
on :func:`~harness.primitives.kv_cache.new_cache` hands out :class:`~harness.primitives.static_cache.StaticKV`
caches and :class:`~harness.primitives.forward.CountedModel` sends every forward on such a cache to the runner, so
decoders run unchanged in either mode.

A forward of T tokens at cache length n, in graphs mode:

1. T is padded up to the next bucket Tb of :data:`BUCKETS` (the pad repeats the last token; a T beyond the
   largest bucket runs at its own length, uncaptured: long prefills);
2. the inputs are copied into static buffers of that shape: token ids, position ids, the cache positions to
   write (n .. n+Tb-1) and a 4-D additive attention mask over the cache's whole capacity — causal by default, the
   caller's 2-D padding mask or 4-D tree mask (cached positions + the T fed) placed in it, every position past
   the valid length masked for the real queries;
3. on CUDA the forward of that (rows, Tb) shape is captured once (warm-up on a side stream, one memory pool
   shared by the model's graphs) and replayed; elsewhere the same static-buffer forward runs eagerly (so the
   whole path but the capture is exercised on a CPU);
4. the cache's valid length moves to n+T (the padded positions' entries are stale and overwritten later), and the
   logits of the T real positions are returned (copies: the static outputs are overwritten by the next replay).

The capture (step 3) runs only with ``torch.cuda.is_available()`` and a model on a CUDA device.

The trained heads run in the mode too, each on a runner of its own (attached by its decoder,
:class:`~harness.decoders.head_drafting.HeadDecoder`, capturing iff the target's does): EAGLE's head on a static
cache through :meth:`GraphRunner.step` (its ``features``/``embeds`` padded as ids are, its tree masks placed as
above), Medusa's heads, cacheless and of one shape, through :meth:`GraphRunner.call`.
"""
from __future__ import annotations

import weakref
from typing import Any

import torch

from harness.errors import ConfigError
from harness.primitives.static_cache import Slot, StaticKV

EXECUTIONS = ("eager", "graphs")
DEFAULT_EXECUTION = "eager"
BUCKETS = (1, 2, 4, 8, 16, 32, 64)  # verification / drafting widths padded up to one of these
INITIAL_CAPACITY = 512  # positions a new slot holds before it grows
WARMUP_RUNS = 2  # eager runs on a side stream before a capture (cuBLAS handles, lazy inits)
_ATTR = "_harness_graph_runner"


def check_execution(value) -> str:
    """The execution mode's name, or a :class:`ConfigError` naming the valid ones."""
    if value not in EXECUTIONS:
        raise ConfigError(f"unknown pair.execution {value!r}. Valid: {', '.join(EXECUTIONS)}", key="pair.execution")
    return value


def set_execution(model, mode: str, **runner_kwargs) -> None:
    """Run ``model`` in ``mode`` from now on (a graphs runner, once made, is kept with its buffers and graphs
    and is reactivated by a later switch back to graphs)."""
    check_execution(mode)
    runner = getattr(model, _ATTR, None)
    if mode == "graphs" and runner is None:
        runner = GraphRunner(model, **runner_kwargs)
        setattr(model, _ATTR, runner)
    if runner is not None:
        runner.active = mode == "graphs"


def graph_runner(model) -> GraphRunner | None:
    """The model's active graphs runner, or None in eager mode."""
    runner = getattr(model, _ATTR, None)
    return runner if runner is not None and runner.active else None


def execution_of(model) -> str:
    return "graphs" if graph_runner(model) is not None else "eager"


def execution_facts(models: dict) -> dict:
    """``{"mode", role: runner counters}`` for ``{role: model}`` (the first model's mode): in graphs mode each
    runner's captured shapes, replays, forwards run uncaptured, cache slots and growths, cumulative since it was
    made, and whether it captures at all."""
    first = next(m for m in models.values() if m is not None)
    facts: dict = {"mode": execution_of(first)}
    for role, model in models.items():
        runner = graph_runner(model) if model is not None else None
        if runner is not None:
            facts[role] = {**runner.stats, "capture": runner.capture}
    return facts


class GraphRunner:
    """Static caches and captured forwards of one model (see the module docstring)."""

    def __init__(self, model, capacity: int = INITIAL_CAPACITY, buckets=BUCKETS, capture: bool | None = None):
        from harness.primitives.forward import cache_kwarg

        self.model = model
        self.capacity, self.buckets = int(capacity), tuple(sorted(buckets))
        device = next(model.parameters()).device
        self.capture = (torch.cuda.is_available() and device.type == "cuda") if capture is None else bool(capture)
        self.dtype = next(model.parameters()).dtype
        self.cache_kwarg = cache_kwarg(model)
        self.lm = _takes(model, "input_ids")  # a causal LM (logits out), else a head's module (its output tensor)
        config: Any = getattr(model, "config", None)
        config = config.get_text_config() if hasattr(config, "get_text_config") else config
        self.num_layers = int(getattr(config, "num_hidden_layers", 0))  # a cacheless head: none
        self.slots: list[tuple[Slot, weakref.ref | None]] = []
        self.graphs: dict = {}  # the cacheless calls' static inputs and graphs (:meth:`call`)
        self.pool = None
        self.active = True
        self.stats = {"captures": 0, "replays": 0, "uncaptured": 0, "slots": 0, "growths": 0}

    def new_cache(self) -> StaticKV:
        """A cache on a free slot (one whose last cache is gone), else on a new slot."""
        for i, (slot, owner) in enumerate(self.slots):
            if owner is None or owner() is None:
                break
        else:
            slot, i = Slot(self.capacity), len(self.slots)
            self.slots.append((slot, None))
            self.stats["slots"] += 1
        cache = StaticKV(self, slot, self.num_layers)
        self.slots[i] = (slot, weakref.ref(cache))
        return cache

    def bucket(self, t: int) -> int:
        return next((b for b in self.buckets if b >= t), t)

    @torch.inference_mode()
    def forward(self, input_ids: torch.Tensor, cache: StaticKV, *, position_ids=None, attention_mask=None,
                keep: int | None = None, return_hidden: bool = False):
        """Logits (B, T or keep, V_model) of the T real positions, and the last hidden states (or None)."""
        logits, hidden = self.step({"input_ids": input_ids}, cache, position_ids=position_ids,
                                   attention_mask=attention_mask, return_hidden=return_hidden)
        if keep is not None:
            logits = logits[:, logits.size(1) - int(keep):]
        return logits, hidden

    @torch.inference_mode()
    def step(self, inputs: dict[str, torch.Tensor], cache: StaticKV, *, position_ids=None, attention_mask=None,
             return_hidden: bool = False):
        """The model's forward over T positions at the cache's length (the module docstring's steps 1-4).

        ``inputs``: the per-position inputs {keyword: (B, T, ...)}, padded as step 1 pads the ids — a causal LM's
        ``input_ids``; EAGLE's head its ``features`` and ``embeds`` (:class:`~harness.primitives.forward.CountedHead`
        sends a head's call here when its cache is static). Returns the T real positions' output (an LM's logits, a
        head's output tensor) and the last hidden states (or None)."""
        b, t = next(iter(inputs.values())).shape[:2]
        n, tb = cache.length, self.bucket(t)
        grown = cache.slot.generation
        ready = cache.prepare(b, n + tb)
        self.stats["growths"] += cache.slot.generation - grown
        static = self._static_inputs(cache.slot, inputs, b, tb)
        self._fill(static, inputs, position_ids, attention_mask, n, t)
        cache.write_idx = static["write_idx"]
        key = ("graph", b, tb, bool(return_hidden))
        graph = cache.slot.graphs.get(key)
        if graph is None and ready and self.capture and tb <= self.buckets[-1]:
            graph = self._capture(cache, static, bool(return_hidden), key)
        if graph is not None:
            graph.replay()
            self.stats["replays"] += 1
            out, hidden = static[("out", bool(return_hidden))]
            out, hidden = out[:, :t].clone(), (hidden[:, :t].clone() if hidden is not None else None)
        else:
            self.stats["uncaptured"] += 1
            out, hidden = self._run(cache, static, bool(return_hidden))
            out, hidden = out[:, :t], (hidden[:, :t] if hidden is not None else None)
        cache.length = n + t
        return out, hidden

    @torch.inference_mode()
    def call(self, *args: torch.Tensor) -> torch.Tensor:
        """A cacheless forward ``model(*args)`` on tensors of fixed shapes (Medusa's heads on one hidden state):
        the arguments copied into static buffers of their shapes, the forward captured once per shape on CUDA and
        replayed (elsewhere run eagerly on the same buffers); returns a copy of its output."""
        key = ("call", tuple((tuple(a.shape), a.dtype, a.device) for a in args))
        static = self.graphs.get(("inputs", key))
        if static is None:
            static = self.graphs[("inputs", key)] = {"args": [torch.empty_like(a) for a in args]}
        for buffer, arg in zip(static["args"], args):
            buffer.copy_(arg)
        graph = self.graphs.get(key)
        if graph is None and self.capture:
            graph = self._capture(None, static, False, key)
        if graph is not None:
            graph.replay()
            self.stats["replays"] += 1
            return static[("out", False)][0].clone()
        self.stats["uncaptured"] += 1
        return self._run(None, static, False)[0]

    def _static_inputs(self, slot: Slot, inputs: dict, b: int, tb: int) -> dict:
        key = ("inputs", b, tb)
        if key not in slot.graphs:
            device = next(iter(inputs.values())).device
            slot.graphs[key] = {
                "inputs": {name: torch.zeros(b, tb, *x.shape[2:], dtype=x.dtype, device=device)
                           for name, x in inputs.items()},
                "pos": torch.zeros(b, tb, dtype=torch.long, device=device),
                "write_idx": torch.zeros(tb, dtype=torch.long, device=device),
                "mask": torch.zeros(b, 1, tb, slot.capacity, dtype=self.dtype, device=device)}
        return slot.graphs[key]

    def _fill(self, static: dict, inputs: dict, position_ids, attention_mask, n: int, t: int) -> None:
        b, tb = static["pos"].shape
        dev = static["pos"].device
        for name, x in inputs.items():  # the padded queries: the last position's inputs again
            buffer, x = static["inputs"][name], x.to(dev)
            buffer[:, :t].copy_(x)
            if tb > t:
                buffer[:, t:].copy_(x[:, -1:].expand(-1, tb - t, *x.shape[2:]))
        if position_ids is None:
            pos = torch.arange(n, n + t, device=dev)[None].expand(b, -1)
        else:
            pos = position_ids.to(dev).expand(b, -1)
        static["pos"][:, :t].copy_(pos)
        if tb > t:  # ... at the following positions
            static["pos"][:, t:].copy_(pos[:, -1:] + torch.arange(1, tb - t + 1, device=dev))
        static["write_idx"].copy_(torch.arange(n, n + tb, device=dev))
        fill_mask(static["mask"], attention_mask, n, t)

    def _run(self, cache: StaticKV | None, static: dict, return_hidden: bool):
        """The forward on the static buffers: ``(output, last hidden states or None)``."""
        if cache is None:  # a cacheless call
            return self.model(*static["args"]), None
        kwargs = {self.cache_kwarg: cache, "position_ids": static["pos"], "attention_mask": static["mask"]}
        if not self.lm:  # a head's module: its output tensor
            return self.model(**static["inputs"], **kwargs), None
        kwargs["use_cache"] = True
        if return_hidden:
            kwargs["output_hidden_states"] = True
        out = self.model(**static["inputs"], **kwargs)
        return out.logits, (out.hidden_states[-1] if return_hidden else None)

    def _capture(self, cache: StaticKV | None, static: dict, return_hidden: bool, key: tuple):
        """Capture this shape's forward on the slot's buffers, or a cacheless call's on the runner's (CUDA only;
        unverified without a GPU run)."""
        device = static["pos"].device if cache is not None else static["args"][0].device
        side = torch.cuda.Stream(device=device)
        side.wait_stream(torch.cuda.current_stream(device))
        with torch.cuda.stream(side):  # warm-up: the same inputs, so its cache writes equal the replay's
            for _ in range(WARMUP_RUNS):
                self._run(cache, static, return_hidden)
        torch.cuda.current_stream(device).wait_stream(side)
        if self.pool is None:
            self.pool = torch.cuda.graph_pool_handle()
        graph = torch.cuda.CUDAGraph()
        # thread_local: only this thread is held to capture rules (the energy sampler's thread keeps polling)
        with torch.cuda.graph(graph, pool=self.pool, capture_error_mode="thread_local"):
            static[("out", return_hidden)] = self._run(cache, static, return_hidden)
        (cache.slot.graphs if cache is not None else self.graphs)[key] = graph
        self.stats["captures"] += 1
        return graph


def _takes(model, keyword: str) -> bool:
    import inspect

    try:
        return keyword in inspect.signature(model.forward).parameters
    except (TypeError, ValueError):
        return False


def fill_mask(mask: torch.Tensor, attention_mask, n: int, t: int) -> None:
    """Write the additive mask (B, 1, Tb, capacity) of a forward of ``t`` real tokens at cache length ``n``.

    Causal over the cache (query i sees positions ≤ n + i, padded queries included), then the caller's mask:
    a 2-D (B, n + t) padding mask removes its zeros; a 4-D (B|1, 1, t, n + t) mask (additive or boolean) replaces
    the real queries' first n + t columns. Positions ≥ n + t are never visible to a real query; every row keeps
    its own position, so that no row is fully masked.
    """
    b, _, tb, cap = mask.shape
    lo = torch.finfo(mask.dtype).min
    dev = mask.device
    cols = torch.arange(cap, device=dev)
    rows = n + torch.arange(tb, device=dev)
    causal = torch.zeros(tb, cap, dtype=mask.dtype, device=dev).masked_fill_(cols[None, :] > rows[:, None], lo)
    mask.copy_(causal.expand(b, 1, tb, cap))  # in the mask's dtype (a Python min of float64 overflows float32)
    if attention_mask is None:
        return
    width = attention_mask.size(-1)
    if width != n + t:
        raise ValueError(f"attention mask covers {width} positions; the cache holds {n} and {t} are fed")
    am = attention_mask.to(dev)
    if am.dim() == 2:
        mask[:, 0, :, :width].masked_fill_(am[:, None, :] == 0, lo)
        diag = torch.arange(tb, device=dev)
        mask[:, 0, diag, n + diag] = 0
    elif am.dim() == 4:
        vals = torch.where(am, 0.0, lo).to(mask.dtype) if am.dtype == torch.bool else am.to(mask.dtype)
        mask[:, :, :t, :width].copy_(vals.expand(b, 1, t, width))
    else:
        raise ValueError(f"attention mask of {am.dim()} dimensions; expected 2 (padding) or 4 (per query)")
