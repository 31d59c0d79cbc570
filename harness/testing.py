"""Toy models with an enumerable vocabulary, for exact-distribution tests of decoders.

A toy model is a real (randomly initialised, tiny) HF Llama with a vocabulary of a few
tokens, so decoders exercise the same code path (KV caches, masks) as with real models,
while the exact probability of every sequence can be computed by enumeration.
"""
from __future__ import annotations

import copy
import itertools
import math
from collections import Counter

import torch

from harness.models import ModelPair
from harness.primitives.warping import Warp


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


@torch.no_grad()
def next_token_probs(model, prefix: list[int], warp: Warp) -> torch.Tensor:
    """T∘p(· | prefix) by a full (uncached) forward: the reference every decoder must match."""
    logits = model(input_ids=torch.tensor([prefix])).logits[0, -1].float()
    return warp.probs(logits)


@torch.no_grad()
def exact_sequence_distribution(model, prompt: list[int], length: int, warp: Warp,
                                eos_token_id: int | None = None) -> dict[tuple[int, ...], float]:
    """Exact probability of every continuation of ``length`` tokens under AR sampling from T∘p.

    With an EOS id, sequences end at EOS (shorter tuples). Enumerates V^length prefixes.
    """
    dist: dict[tuple[int, ...], float] = {}
    frontier = {(): 1.0}
    for _ in range(length):
        nxt = {}
        for seq, pr in frontier.items():
            probs = next_token_probs(model, prompt + list(seq), warp)
            for tok in torch.nonzero(probs > 0).flatten().tolist():
                s, q = seq + (tok,), pr * float(probs[tok])
                if eos_token_id is not None and tok == eos_token_id:
                    dist[s] = dist.get(s, 0.0) + q
                else:
                    nxt[s] = q
        frontier = nxt
    for s, q in frontier.items():
        dist[s] = dist.get(s, 0.0) + q
    return dist


def total_variation(samples: list[tuple[int, ...]], exact: dict[tuple[int, ...], float]) -> float:
    """TV distance between the empirical distribution of ``samples`` and ``exact``."""
    counts = Counter(samples)
    n = len(samples)
    keys = set(counts) | set(exact)
    return 0.5 * sum(abs(counts.get(k, 0) / n - exact.get(k, 0.0)) for k in keys)


def tv_bound(exact: dict, n: int, delta: float = 1e-3) -> float:
    """High-probability bound on TV(empirical, exact) for n i.i.d. samples (probability ≥ 1 − delta).

    E[TV] ≤ ½ Σ_k sqrt(p_k (1 − p_k) / n), and TV is a ½·(2/n)-bounded-difference function of the
    samples, so by McDiarmid TV ≤ E[TV] + sqrt(ln(1/δ) / (2n)).
    """
    expected = 0.5 * sum(math.sqrt(p * (1 - p) / n) for p in exact.values())
    return expected + math.sqrt(math.log(1 / delta) / (2 * n))


def all_sequences(vocab_size: int, length: int):
    return itertools.product(range(vocab_size), repeat=length)


def chi_square_pvalue(samples: list, exact: dict, min_expected: float = 5.0) -> float:
    """Pearson chi-square goodness-of-fit p-value of ``samples`` against ``exact`` probabilities.

    Outcomes expected fewer than ``min_expected`` times are pooled into one cell (the usual
    validity condition); a sample outside the support of ``exact`` gives p = 0.
    """
    from scipy.stats import chisquare

    counts = Counter(samples)
    n = len(samples)
    if any(k not in exact or exact[k] <= 0 for k in counts):
        return 0.0
    observed, expected, pool_obs, pool_exp = [], [], 0, 0.0
    for k, p in exact.items():
        if n * p >= min_expected:
            observed.append(counts.get(k, 0))
            expected.append(n * p)
        else:
            pool_obs += counts.get(k, 0)
            pool_exp += n * p
    if pool_exp > 0:
        observed.append(pool_obs)
        expected.append(pool_exp)
    if len(observed) < 2:
        return 1.0
    scale = sum(observed) / sum(expected)  # absorb float rounding of the exact probabilities
    return float(chisquare(observed, [e * scale for e in expected]).pvalue)
