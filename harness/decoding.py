"""The decoding setting every method follows: greedy, or sampling with the warp T (temperature → top-k → top-p).

One ``decoding`` config group (``decoding=greedy|sampling|sampling_dsbd``, each field overridable per
run, e.g. ``decoding.top_k=10``) and the same presets in the Python API
(``build_decoder(..., decoding="greedy")``), so a sweep ``-m method=ar,sd,specinfer decoding=greedy,sampling``
compares like with like. The presets are defined here once:

* ``sampling`` — the mtad paper's App. F: keep the top 20 tokens, then top-p 0.9, temperature 1 (the
  default, and the defaults of every sampled method's Params);
* ``sampling_dsbd`` — the dsbd paper's §4.1 (its experiments): top-k 10, top-p 0.8 (``sampling_seed000``
  until 0.2: still accepted at the doors, the command line and :func:`harness.methods.read_decoding`, with a
  deprecation message: :mod:`harness.config.legacy`);
* ``greedy`` — temperature 0: argmax decoding (the warp's other fields are unused).
"""
from __future__ import annotations

from dataclasses import asdict, dataclass, field
from typing import Any, Mapping

from harness.errors import ConfigError
from harness.primitives.warping import Warp

WARP_KEYS = ("temperature", "top_k", "top_p")


@dataclass(frozen=True)
class Decoding:
    """A decoding setting: a name and the warp T every method applies (temperature 0 = greedy)."""

    name: str = field(default="sampling", metadata={"help": "preset name (for labels)"})
    temperature: float = field(default=1.0, metadata={"help": "temperature of the warp T; 0 = greedy"})
    top_k: int = field(default=20, metadata={"help": "keep the k most likely tokens (0 = off)"})
    top_p: float = field(default=0.9, metadata={"help": "nucleus: keep the smallest set of probability >= p"})

    def __post_init__(self):
        Warp(self.temperature, self.top_k, self.top_p)  # validates the ranges (one place)

    @property
    def kind(self) -> str:
        """``"greedy"`` (temperature 0) or ``"sampling"``."""
        return "greedy" if self.temperature == 0 else "sampling"

    def warp_params(self) -> dict[str, Any]:
        return {k: getattr(self, k) for k in WARP_KEYS}

    def as_dict(self) -> dict[str, Any]:
        return asdict(self)


PRESETS: dict[str, Decoding] = {
    "greedy": Decoding("greedy", temperature=0.0, top_k=0, top_p=1.0),
    "sampling": Decoding("sampling", temperature=1.0, top_k=20, top_p=0.9),  # mtad App. F
    "sampling_dsbd": Decoding("sampling_dsbd", temperature=1.0, top_k=10, top_p=0.8),  # dsbd §4.1
}
SAMPLING = PRESETS["sampling"]


def as_decoding(decoding: str | Mapping[str, Any] | Decoding) -> Decoding:
    """A preset name, a mapping (a composed ``decoding`` config, overrides included) or a Decoding."""
    if isinstance(decoding, Decoding):
        return decoding
    if isinstance(decoding, str):
        if decoding not in PRESETS:
            raise ConfigError(f"unknown decoding '{decoding}'. Valid decodings: {', '.join(PRESETS)}")
        return PRESETS[decoding]
    values = dict(decoding)
    unknown = sorted(set(values) - {"name", *WARP_KEYS})
    if unknown:
        raise ConfigError(f"unknown decoding key(s) {unknown}. Valid keys: name, {', '.join(WARP_KEYS)}")
    values.setdefault("name", "custom")
    return Decoding(**values)

