"""Decoders, one per module; importing this package registers every one of them."""
import importlib
import pkgutil

from harness.decoders.base import Decoder, Generation, GenerationStats, build_decoder, register, registry

for _m in pkgutil.iter_modules(__path__):
    if _m.name != "base" and not _m.name.startswith("_"):
        importlib.import_module(f"{__name__}.{_m.name}")

__all__ = ["Decoder", "Generation", "GenerationStats", "build_decoder", "register", "registry"]
