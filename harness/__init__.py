"""Benchmarking and energy-measurement harness for LLM decoding methods.

Python API (no Hydra needed)::

    from harness import load_pair, build_decoder
    pair = load_pair()                                 # the embedded tiny pair, offline
    gen = build_decoder("ar_sampling", pair, top_k=20).generate(ids, max_new_tokens=32, seed=0)

The names below are imported on first use, so that torch-free parts (the analysis package and
``harness-report``) can be imported without loading torch and the decoders.
"""
import importlib

_EXPORTS = {"Generation": "harness.decoders", "GenerationStats": "harness.decoders",
            "build_decoder": "harness.decoders", "registry": "harness.decoders",
            "ModelPair": "harness.models", "load_pair": "harness.models"}

__all__ = sorted(_EXPORTS)
__version__ = "0.1.0"


def __getattr__(name):
    if name in _EXPORTS:
        return getattr(importlib.import_module(_EXPORTS[name]), name)
    raise AttributeError(f"module 'harness' has no attribute {name!r}")
