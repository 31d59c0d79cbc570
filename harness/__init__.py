"""Benchmarking and energy-measurement harness for LLM decoding methods.

Python API (no Hydra needed), on par with the CLI — the same method names and aliases (``ar``,
``beam``), the same decoding presets, the same prompt encoding (chat templates)::

    from harness import build_decoder, encode_prompt, load_pair
    pair = load_pair()                                 # the embedded tiny pair, offline
    ids = encode_prompt(pair.tokenizer, "In the beginning")   # a string, or chat messages
    gen = build_decoder("sd", pair, gamma=4, decoding="greedy").generate(ids, max_new_tokens=32, seed=0)
"""
from harness.decoders import Generation, GenerationStats, build_decoder, registry
from harness.decoders.base import Beam, method_names
from harness.decoding import PRESETS as DECODINGS
from harness.decoding import Decoding
from harness.models import ModelPair, load_pair
from harness.tasks.base import encode_prompt

__all__ = ["Beam", "DECODINGS", "Decoding", "Generation", "GenerationStats", "ModelPair", "build_decoder",
           "encode_prompt", "load_pair", "method_names", "registry"]
__version__ = "0.2.0"
