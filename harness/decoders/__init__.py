"""Decoders, one per module (the contract: :mod:`harness.decoders.base`; the speculative template:
:mod:`harness.decoders.speculative`), each method's keys in :mod:`harness.decoders.params`; the registry imports
every decoder on first use. Methods by name, aliases and building a decoder from a config: :mod:`harness.methods`.

The contract's names below load :mod:`harness.decoders.base` (and torch) when first used, so that the torch-free
:mod:`harness.decoders.params` can be imported alone (``harness --help``, ``harness ls``)."""
from __future__ import annotations

import importlib
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from harness.decoders.base import Decoded, Decoder, Generation, GenerationStats, register, registry

__all__ = ["Decoded", "Decoder", "Generation", "GenerationStats", "register", "registry"]


def __getattr__(name: str) -> Any:
    if name in __all__:
        return getattr(importlib.import_module("harness.decoders.base"), name)
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
