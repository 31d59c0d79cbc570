"""Where a decoder's tensors and random streams live: on its model's device, written once (issue 28 item 1).

On a GPU a tensor made without ``device=`` lands on the host, and a generator made for one device cannot drive
a draw on another (``Expected a 'cpu' device type for generator but found 'cuda'``: ``hf_assisted`` on every
CUDA cell). Every decoder makes its tensors and generators with these helpers or with an explicit
``device=`` of its model's device; a CPU test holds every registered method to it by running it with the
default device set to ``meta`` under :class:`~harness.testing.host_sync.DeviceGuard` (tests/decoders/test_device.py).

* :func:`device_of` — the device of a model (a :class:`~harness.primitives.forward.CountedModel`, a counted
  head, an ``nn.Module``, a tensor or anything with ``.device``);
* :func:`ids_on` — token ids from host ints as a long tensor on a device (one host-to-device copy: on a GPU a
  synchronising call, :mod:`harness.testing.host_sync`; keep tokens on the device where they came from it);
* :func:`make_generator` — a seeded generator on a device (None without a seed: torch's global stream);
* :func:`seed_from` — a seed drawn from a generator, on the generator's own device;
* :func:`upload` — a long tensor of host ints on a device, copied without waiting: from host memory (pinned for a
  CUDA device) with ``non_blocking=True``, queued on the device's stream, so the host does not wait for the device
  (a blocking ``torch.tensor(values, device=...)`` of pageable memory does: a synchronising call);
* :func:`host_constant` — :func:`upload`, once per distinct value, the device tensor kept (a tree's shape, a
  walk's index: the shapes a decoder's rounds repeat cost no copy after the first).
"""
from __future__ import annotations

from functools import lru_cache
from typing import Iterable

import numpy as np
import torch


def device_of(model) -> torch.device:
    """The device ``model``'s computation runs on (its parameters' for a module without ``.device``)."""
    device = getattr(model, "device", None)
    if isinstance(device, (torch.device, str)):
        return torch.device(device)
    module = getattr(model, "module", model)
    return next(module.parameters()).device


def ids_on(tokens: Iterable[int] | torch.Tensor, device: torch.device | str, rows: bool = True) -> torch.Tensor:
    """``tokens`` as a long tensor on ``device``: (1, n) with ``rows`` (a batch of one, a model's input), else (n,)."""
    t = torch.as_tensor(tokens if isinstance(tokens, torch.Tensor) else list(tokens), dtype=torch.long,
                        device=device)
    return t.reshape(1, -1) if rows else t.reshape(-1)


def make_generator(seed: int | None, device: torch.device | str) -> torch.Generator | None:
    """A generator on ``device`` seeded with ``seed``; None (torch's global stream) without one."""
    if seed is None:
        return None
    g = torch.Generator(device=device)
    g.manual_seed(int(seed))
    return g


def seed_from(generator: torch.Generator) -> int:
    """A seed in [0, 2^62) drawn from ``generator`` on its own device (e.g. to seed a library's global stream)."""
    return int(torch.randint(0, 2**62, (1,), generator=generator, device=generator.device))


def upload(values, device: torch.device | str | None) -> torch.Tensor:
    """``values`` (ints, or equal-length sequences of ints) as a long tensor on ``device``, without making the host
    wait (issue 28 item 2). The values are put in host memory — page-locked for a CUDA device — and copied with
    ``non_blocking=True``: on a GPU the copy is queued on the current stream behind the work already there and the
    host goes on (the caching host allocator keeps the pinned buffer until the copy has run), where
    ``torch.tensor(values, device=...)`` copies pageable memory and waits for the stream. Device work queued after
    it sees the values. On a CPU the host tensor is the result (no copy). Counted as ``async``, not a
    synchronisation, by :class:`~harness.testing.host_sync.SyncCounter`."""
    host = torch.from_numpy(np.asarray(values, dtype=np.int64))
    target = torch.device(device) if device is not None else torch.device("cpu")
    if target.type == "cuda":
        host = host.pin_memory()
    return host.to(target, non_blocking=True)


def host_constant(values: tuple, device: torch.device | str | None) -> torch.Tensor:
    """``values`` (a tuple of ints, or of equal-length tuples of ints) as a long tensor on ``device``, copied to the
    device (:func:`upload`, the host does not wait) the first time these values are asked for and the same tensor
    returned after (never modify it): a shape a decoder's rounds repeat (a static tree, a merged tree seen before,
    the same walk) costs no copy after the first."""
    return _constant(values, str(torch.device(device)) if device is not None else "cpu")


@lru_cache(maxsize=256)
def _constant(values: tuple, device: str) -> torch.Tensor:
    return upload(values, device)
