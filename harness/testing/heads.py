"""Random trained-head checkpoints for toy pairs: the head decoders' exactness must not depend on head quality.

:func:`random_head_params` gives a method's head key pointing at a randomly initialised head of the published
layout that fits a toy pair's target ({} for methods without a trained head), so tests that enumerate the
registry build every decoder on toy pairs.
"""
from __future__ import annotations

import tempfile

import torch

_DIRS: dict[tuple, str] = {}


def random_medusa(hidden: int, vocab: int, num_heads: int = 3, seed: int = 3) -> torch.nn.Module:
    from harness.heads.medusa import MedusaConfig, MedusaHeads

    torch.manual_seed(seed)
    return MedusaHeads(MedusaConfig(num_heads=num_heads, num_layers=1, hidden_size=hidden, vocab_size=vocab),
                       zero_init=False)


def random_eagle(hidden: int, vocab: int, seed: int = 4) -> torch.nn.Module:
    from transformers import LlamaConfig

    from harness.heads.eagle import EagleHead

    torch.manual_seed(seed)
    return EagleHead(LlamaConfig(vocab_size=vocab, hidden_size=hidden, intermediate_size=2 * hidden,
                                 num_hidden_layers=1, num_attention_heads=2, num_key_value_heads=1,
                                 max_position_embeddings=64))


def random_acceptance_head(hidden: int, seed: int = 5) -> torch.nn.Module:
    from harness.heads.specdecpp import AcceptanceHead

    torch.manual_seed(seed)
    return AcceptanceHead(hidden, num_layers=1)


def saved(kind: str, module_factory, *key) -> str:
    """A temporary directory holding ``module_factory()`` saved in float32 (one per ``(kind, *key)``)."""
    full = (kind, *key)
    if full not in _DIRS:
        path = tempfile.mkdtemp(prefix=f"random_{kind}_")
        module_factory().save_pretrained(path, dtype=torch.float32)
        _DIRS[full] = path
    return _DIRS[full]


def random_head_params(method: str, pair) -> dict:
    """``{head key: directory}`` of a random head fitting ``pair``'s target for a trained-head method, else {}."""
    from harness.decoders.eagle2 import Eagle2
    from harness.decoders.medusa import MedusaDecoder
    from harness.methods import decoder_class

    cls = decoder_class(method)
    hidden, vocab = int(pair.target.config.hidden_size), pair.vocab_size
    if issubclass(cls, MedusaDecoder):
        return {"heads": saved("medusa", lambda: random_medusa(hidden, vocab), hidden, vocab),
                "choices": "[[0], [1], [0, 0], [0, 1], [1, 0], [2], [0, 0, 0]]"}
    if issubclass(cls, Eagle2):
        return {"head": saved("eagle", lambda: random_eagle(hidden, vocab), hidden, vocab),
                "tree_top_k": 3, "depth": 3, "total_tokens": 8}
    return {}
