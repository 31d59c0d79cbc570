"""Decoders, one per module (the contract: :mod:`harness.decoders.base`; the speculative template:
:mod:`harness.decoders.speculative`); the registry imports every one on first use. Methods by name, aliases
and building a decoder from a config: :mod:`harness.methods`."""
from harness.decoders.base import Decoded, Decoder, Generation, GenerationStats, register, registry

__all__ = ["Decoded", "Decoder", "Generation", "GenerationStats", "register", "registry"]
