"""Benchmarking and energy-measurement harness for LLM decoding methods.

Python API (no Hydra needed), on par with the CLI — the same method names and aliases (``ar``,
``beam``), the same decoding presets, the same prompt encoding (chat templates)::

    from harness import build_decoder, encode_prompt, load_pair
    pair = load_pair()                                 # the embedded tiny pair, offline
    ids = encode_prompt(pair.tokenizer, "In the beginning")   # a string, or chat messages
    gen = build_decoder("sd", pair, gamma=4, decoding="greedy").generate(ids, max_new_tokens=32, seed=0)

Cells and sweeps with DataFrames back (:mod:`harness.api`: the same composition, validation and runner as the
CLI)::

    import harness
    df = harness.run(method="sd", decoding="greedy", dataset={"num_prompts": 2}, max_new_tokens=16)
    df.attrs["summary"]                      # one row per cell
    both = harness.sweep([{"method": "ar"}, {"method": "sd", "gamma": 3}], decoding="greedy")

The names below are imported on first use, so that torch-free parts (the analysis package and
``harness-report``) can be imported without loading torch and the decoders.
"""
import importlib

_EXPORTS = {"Generation": ("harness.decoders", "Generation"),
            "GenerationStats": ("harness.decoders", "GenerationStats"),
            "build_decoder": ("harness.methods", "build_decoder"),
            "registry": ("harness.decoders", "registry"),
            "Beam": ("harness.decoders.base", "Beam"),
            "method_names": ("harness.methods", "method_names"),
            "DECODINGS": ("harness.decoding", "PRESETS"),
            "Decoding": ("harness.decoding", "Decoding"),
            "ModelPair": ("harness.models", "ModelPair"),
            "load_pair": ("harness.models", "load_pair"),
            "encode_prompt": ("harness.tasks.base", "encode_prompt"),
            "run": ("harness", "run"),  # the room harness.run, callable: harness.api.run
            "sweep": ("harness.api", "sweep")}

__all__ = sorted(_EXPORTS)
__version__ = "0.3.1.dev0"


def __getattr__(name):
    if name == "run":  # the subpackage (a callable module): harness.run(...) runs a cell (harness.api.run)
        return importlib.import_module("harness.run")
    if name in _EXPORTS:
        module, attr = _EXPORTS[name]
        return getattr(importlib.import_module(module), attr)
    raise AttributeError(f"module 'harness' has no attribute {name!r}")
