"""Benchmarking and energy-measurement harness for LLM decoding methods.

Python API (no Hydra needed)::

    from harness import load_pair, build_decoder
    pair = load_pair()                                 # the embedded tiny pair, offline
    gen = build_decoder("ar_sampling", pair, top_k=20).generate(ids, max_new_tokens=32, seed=0)
"""
from harness.decoders import Generation, GenerationStats, build_decoder, registry
from harness.models import ModelPair, load_pair

__all__ = ["Generation", "GenerationStats", "ModelPair", "build_decoder", "load_pair", "registry"]
__version__ = "0.1.0"
