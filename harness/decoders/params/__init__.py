"""Every decoder's parameters, torch-free: ``harness/decoders/params/<method>.py`` holds the ``Params`` of
``harness/decoders/<method>.py`` (the method's config keys, defaults, help and checks), so that the config tools
(``harness --help``, ``harness ls``, the ConfigStore nodes of :mod:`harness.config.groups`) know every method
and its keys without importing torch or the decoders. The decoder subclasses ``Decoder[ItsParams]`` with the
same class (checked when the decoders register: :func:`harness.decoders.base.register`).

A params module imports nothing heavy at its top (checks that need a heavy module import it inside the check),
and names its method's Params ``Params``; :func:`method_params` lists them by method.
"""
from __future__ import annotations

import functools
import importlib
import pkgutil
from dataclasses import dataclass

from harness.decoding import SAMPLING
from harness.errors import ConfigError
from harness.params import Params, param
from harness.primitives.warping import Warp

__all__ = ["DecoderParams", "SamplingParams", "SpeculativeParams", "method_params", "param"]


@dataclass(frozen=True)
class DecoderParams(Params):
    """Base of every decoder's parameters: a frozen dataclass whose fields are the method's config keys."""

    @property
    def decoding(self) -> str:
        """``"greedy"`` (deterministic) or ``"sampling"``."""
        return "greedy"

    @property
    def lookahead(self) -> int:
        """Positions a generation may touch beyond its accepted output (for fitting prompts into the
        context, :mod:`harness.run.context`): the deepest draft of a round plus the bonus token; 1 without drafts."""
        return 1

    def describe_group(self) -> str:
        return "method parameter"


@dataclass(frozen=True)
class SamplingParams(DecoderParams):
    """The warp T of every method that can sample, with its checks, written once. Defaults: the
    ``sampling`` decoding preset (mtad App. F: temperature 1, top-20, top-p 0.9); on the command
    line these come from the ``decoding`` group, never from the method."""

    temperature: float = param(SAMPLING.temperature, "temperature of the warp T; 0 = greedy")
    top_k: int = param(SAMPLING.top_k, "keep the k most likely tokens (0 = off); mtad App. F: 20")
    top_p: float = param(SAMPLING.top_p, "nucleus: keep the smallest set of probability >= p (1 = off); "
                                         "mtad App. F: 0.9")

    @property
    def warp(self) -> Warp:
        return Warp(self.temperature, self.top_k, self.top_p)

    @property
    def decoding(self) -> str:
        return "greedy" if self.temperature == 0 else "sampling"

    def __post_init__(self):
        self.warp  # validates ranges  # noqa: B018

    def require_sampling(self, method: str, why: str) -> None:
        """ConfigError unless the warp samples (``method`` ``why``, e.g. "samples its draft beams")."""
        if self.warp.is_greedy:
            raise ConfigError(f"{method} {why}: it needs temperature > 0 (decoding=sampling)")


@dataclass(frozen=True)
class SpeculativeParams(SamplingParams):
    """Base of the Params of decoders that draft in rounds: ``gamma`` (a field or a property of the subclass)
    is the draft depth per round, the fixed γ and every adaptive γ policy's γ_init."""

    @property
    def lookahead(self) -> int:
        return int(self.gamma) + 1


def method_params() -> dict[str, type[DecoderParams]]:
    """The ``Params`` of every method of this package by name (a module per method), decoders not imported."""
    return dict(_method_params())


@functools.cache
def _method_params() -> dict[str, type[DecoderParams]]:
    return {m.name: importlib.import_module(f"{__name__}.{m.name}").Params for m in pkgutil.iter_modules(__path__)
            if not m.name.startswith("_")}
