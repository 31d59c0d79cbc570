"""Counting, on a CPU, the calls that would make the host wait for the device on a GPU (issue 28 item 2).

On a GPU the host queues kernels and runs ahead; a call that needs a value the device computes stops it
until the queue drains. :class:`SyncCounter` is a :class:`torch.overrides.TorchFunctionMode`: it sees every
torch function and Tensor method called while it is active (the decoder's, the library's and the model's)
and counts, by name, the three kinds of call that synchronise on a CUDA device:

* ``read`` — a device value read on the host: ``.item()``, ``.tolist()``, ``bool/int/float(tensor)``,
  ``operator.index(tensor)``, ``.cpu()``, ``.numpy()`` (not ``.to(device)``: on a CPU ``.to(model.device)``
  cannot be told from a copy to the host);
* ``shape`` — an output whose shape depends on data (``nonzero``, ``masked_select``, ``unique``, indexing
  with a bool mask, one-argument ``where``, ``repeat_interleave`` by a tensor);
* ``upload`` — a tensor made from host data (``torch.tensor``/``as_tensor`` of Python numbers, not of an empty
  list): a pageable host-to-device copy, which PyTorch makes synchronous.

A copy made with ``.to(..., non_blocking=True)`` is counted as ``async`` (in ``by_name`` and ``by_kind``, not in
``total``): CUDA queues it on the stream and the host goes on. The project makes such copies host-to-device only,
from page-locked memory (:func:`harness.primitives.device.upload`); a device-to-host copy made so would have to be
waited for before its values were read, which no project code does.

It runs on a CPU (every tensor is host memory there, so nothing actually waits); the counts are what the
same code does on a GPU. :class:`DeviceGuard` is its sibling for item 1: every tensor a call returns while
it is active must live on the expected device.
"""
from __future__ import annotations

import traceback
from collections import Counter
from contextlib import contextmanager
from pathlib import Path

import torch
from torch.overrides import TorchFunctionMode

_T = torch.Tensor
READS = {_T.item: "item", _T.tolist: "tolist", _T.__bool__: "bool", _T.__int__: "int", _T.__float__: "float",
         _T.__index__: "index", _T.cpu: "cpu", _T.numpy: "numpy"}
SHAPES = {torch.nonzero: "nonzero", _T.nonzero: "nonzero", torch.masked_select: "masked_select",
          _T.masked_select: "masked_select", torch.unique: "unique", _T.unique: "unique",
          torch.argwhere: "argwhere"}
UPLOADS = {torch.tensor: "tensor", torch.as_tensor: "as_tensor"}
ASYNC = "async"  # a kind recorded but not counted as a synchronisation (module docstring)


def _has_bool_index(index) -> bool:
    items = index if isinstance(index, tuple) else (index,)
    return any(isinstance(i, torch.Tensor) and i.dtype == torch.bool for i in items)


def _empty(data) -> bool:
    """Host data with no element (``[]``, ``[[]]``): its copy moves nothing and PyTorch skips it."""
    return isinstance(data, (list, tuple)) and all(isinstance(x, (list, tuple)) and _empty(x) for x in data)


def classify(func, args, kwargs) -> tuple[str, str] | None:
    """(kind, name) of a synchronising call, or None."""
    if func in READS:
        return "read", READS[func]
    if func in SHAPES:
        return "shape", SHAPES[func]
    if func in (_T.__getitem__, _T.__setitem__) and len(args) > 1 and _has_bool_index(args[1]):
        return "shape", "bool_index"
    if func is torch.where and len(args) == 1 and not kwargs:
        return "shape", "where1"
    if func in (torch.repeat_interleave, _T.repeat_interleave) and len(args) > 1 and isinstance(args[1], torch.Tensor):
        return "shape", "repeat_interleave"
    if func in UPLOADS and args and not isinstance(args[0], torch.Tensor) and not _empty(args[0]):
        return "upload", UPLOADS[func]
    if func is _T.to and kwargs.get("non_blocking"):
        return ASYNC, "to"
    return None


class SyncCounter(TorchFunctionMode):
    """Counts synchronising calls (module docstring) while active: ``total``, ``by_kind`` and ``by_name``
    (``"read:tolist"`` …). Nested calls count once: a ``tolist`` whose implementation calls ``item`` is one."""

    def __init__(self):
        super().__init__()
        self.by_name: Counter[str] = Counter()
        self._depth = 0

    def __torch_function__(self, func, types, args=(), kwargs=None):
        kwargs = kwargs or {}
        hit = classify(func, args, kwargs) if self._depth == 0 else None
        if hit is not None:
            self.by_name[f"{hit[0]}:{hit[1]}"] += 1
        self._depth += 1
        try:
            return func(*args, **kwargs)
        finally:
            self._depth -= 1

    @property
    def total(self) -> int:
        """Synchronising calls (the ``async`` copies excluded)."""
        return sum(n for name, n in self.by_name.items() if not name.startswith(ASYNC + ":"))

    @property
    def by_kind(self) -> Counter[str]:
        out: Counter[str] = Counter()
        for name, n in self.by_name.items():
            out[name.split(":")[0]] += n
        return out


class DeviceMismatch(AssertionError):
    pass


class DeviceGuard(TorchFunctionMode):
    """Fails (or records, ``strict=False``) any call made by the project's code (a file under ``harness/``) that
    returns a tensor off ``device`` while active, with the call site: the check behind "every tensor a decoder
    creates lives on its model's device" (issue 28 item 1). Combined with a default device that is not the model's
    (:func:`foreign_default_device`), a factory call that forgets ``device=`` makes a tensor on the wrong device,
    as it does on a GPU, and is caught on a CPU. Library code (transformers) is not the project's to fix: its
    calls are not checked (a CPU index into a device tensor is legal there)."""

    def __init__(self, device: torch.device | str, strict: bool = True):
        super().__init__()
        self.device = torch.device(device)
        self.strict = strict
        self.violations: list[str] = []

    def __torch_function__(self, func, types, args=(), kwargs=None):
        out = func(*args, **(kwargs or {}))
        for t in out if isinstance(out, (tuple, list)) else (out,):
            if isinstance(t, torch.Tensor) and t.device.type != self.device.type:
                caller = _caller()
                if caller is None or not caller.filename.startswith(_PACKAGE):
                    continue
                where = "".join(traceback.format_list(traceback.extract_stack(limit=8)[:-1]))
                msg = f"{getattr(func, '__name__', func)} made a tensor on {t.device}, not {self.device}:\n{where}"
                self.violations.append(msg)
                if self.strict:
                    raise DeviceMismatch(msg)
        return out


_PACKAGE = str(Path(__file__).resolve().parents[1]) + "/"
_TORCH = str(Path(torch.__file__).resolve().parent) + "/"


def _caller() -> traceback.FrameSummary | None:
    """The innermost frame outside torch and this module: the code that asked for the tensor."""
    for frame in reversed(traceback.extract_stack()):
        if not frame.filename.startswith(_TORCH) and frame.filename != __file__:
            return frame
    return None


@contextmanager
def foreign_default_device(device: str = "meta"):
    """Inside the block a tensor made without ``device=`` lands on ``device`` (default ``meta``: no data), not the
    CPU the models are on — what a GPU run does to such a tensor, on a CPU."""
    torch.set_default_device(device)
    try:
        yield
    finally:
        torch.set_default_device(None)


@contextmanager
def counting():
    """``with counting() as c: ...``: a :class:`SyncCounter` active inside the block."""
    counter = SyncCounter()
    with counter:
        yield counter
