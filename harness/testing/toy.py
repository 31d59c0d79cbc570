"""Toy models with an enumerable vocabulary, for exact-distribution tests of decoders.

A toy model is a real (randomly initialised, tiny) HF Llama with a vocabulary of a few
tokens, so decoders exercise the same code path (KV caches, masks) as with real models,
while the exact probability of every sequence can be computed by enumeration
(:mod:`harness.testing.distributions`).
"""
from __future__ import annotations

import copy

import torch

from harness.models import ModelPair


class ToyTokenizer:
    """Minimal tokenizer: token i ↔ the string ``"t{i}"``; optional EOS id."""

    def __init__(self, vocab_size: int, eos_token_id: int | None = None):
        self.vocab_size = vocab_size
        self.eos_token_id = eos_token_id
        self.bos_token_id = None
        self.pad_token_id = eos_token_id

    def get_vocab(self) -> dict[str, int]:
        return {f"t{i}": i for i in range(self.vocab_size)}

    def decode(self, ids, skip_special_tokens: bool = False) -> str:
        return " ".join(f"t{int(i)}" for i in ids)


def toy_model(vocab_size: int = 5, seed: int = 0, hidden: int = 16, layers: int = 2, sharpness: float = 1.0):
    """A tiny random Llama. ``sharpness`` scales the output head (larger = peakier distributions)."""
    from transformers import LlamaConfig, LlamaForCausalLM

    torch.manual_seed(seed)
    cfg = LlamaConfig(vocab_size=vocab_size, hidden_size=hidden, intermediate_size=2 * hidden,
                      num_hidden_layers=layers, num_attention_heads=2, num_key_value_heads=1,
                      max_position_embeddings=64, tie_word_embeddings=False)
    model = LlamaForCausalLM(cfg).eval()
    with torch.no_grad():
        model.lm_head.weight.mul_(sharpness * 8.0)  # random init is near-uniform; make it informative
    return model


def toy_pair(vocab_size: int = 5, target_seed: int = 0, draft_seed: int = 1, eos_token_id: int | None = None,
             with_draft: bool = True, sharpness: float = 1.0) -> ModelPair:
    target = toy_model(vocab_size, target_seed, hidden=24, layers=2, sharpness=sharpness)
    draft = toy_model(vocab_size, draft_seed, hidden=16, layers=1, sharpness=sharpness) if with_draft else None
    return ModelPair(target=target, draft=draft, tokenizer=ToyTokenizer(vocab_size, eos_token_id), name="toy",
                     target_id="toy/target", draft_id="toy/draft" if with_draft else None)


def near_pair(vocab_size: int = 4, noise: float = 0.05, eos_token_id: int | None = None) -> ModelPair:
    """Target = toy Llama; draft = the same model with a perturbed output head (close, not equal)."""
    target = toy_model(vocab_size, seed=0, hidden=24, layers=2)
    draft = copy.deepcopy(target)
    g = torch.Generator().manual_seed(5)
    with torch.no_grad():
        draft.lm_head.weight.add_(noise * torch.randn(draft.lm_head.weight.shape, generator=g))
    return ModelPair(target=target, draft=draft, tokenizer=ToyTokenizer(vocab_size, eos_token_id), name="toy-near")
