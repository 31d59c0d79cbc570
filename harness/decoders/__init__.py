"""Decoders, one per module (see :mod:`harness.decoders.base`); the registry imports every one on first use."""
from harness.decoders.base import Decoded, Decoder, Generation, GenerationStats, build_decoder, register, registry

__all__ = ["Decoded", "Decoder", "Generation", "GenerationStats", "build_decoder", "register", "registry"]
