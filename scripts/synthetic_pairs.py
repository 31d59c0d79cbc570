"""Synthetic draft/target pairs in real shapes with random weights and a controllable acceptance rate.

Random weights alone give a pair whose draft and target disagree almost always (α ≈ 1/V), which
hides what speculative decoding costs per round. Here both models share one "bigram" path — the
target's embedding and LM head live in a ``d_draft``-dimensional subspace of its hidden space and
equal the draft's (up to the RMSNorm scale), so with their transformer layers switched off both
models give the same next-token distribution — and every layer's residual writes (``o_proj``,
``down_proj``) are scaled by ``mix``: the larger ``mix``, the more the two models' layers pull their
distributions apart and the lower the acceptance rate. ``mix`` = 0 is α = 1; α falls smoothly with it
(``--mix`` of the benchmarks; the achieved α is printed beside every table).

Shapes (``SHAPES``) follow the public configs of the families, scaled to what a shared 2-core CPU
runs in minutes (widths ÷ ``scale``, layers ÷ ``layer_scale``, head size kept), so that the draft ÷
target cost ratio c and the LM head's share stay in the real pair's range:

* ``qwen-0.5b/1.5b``: Qwen2.5-1.5B target (1536 wide, 8960 MLP, 28 layers, 12 heads / 2 KV heads) with
  Qwen2.5-0.5B draft (896, 4864, 24 layers, 14 / 2), vocab 151 936;
* ``llama2-7b/68m``: Llama-2-7B (4096, 11008, 32 layers, 32 heads, vocab 32 000) with Llama-68M
  (768, 3072, 2 layers, 12 heads);
* ``tiny``: the embedded tiny pair's shape class (4-layer 128-wide target, 1-layer 64-wide draft).

Used by ``scripts/bench_sd_vs_hf.py``; importable without the harness (it builds a
:class:`harness.models.ModelPair` only in :func:`synthetic_pair`).
"""
from __future__ import annotations

import math

import torch

# (model_type, hidden, intermediate, layers, heads, kv_heads, vocab) per model, from the public configs
SHAPES = {
    "qwen-0.5b/1.5b": (("qwen2", 1536, 8960, 28, 12, 2, 151936), ("qwen2", 896, 4864, 24, 14, 2, 151936)),
    "llama2-7b/68m": (("llama", 4096, 11008, 32, 32, 32, 32000), ("llama", 768, 3072, 2, 12, 12, 32000)),
    "tiny": (("llama", 128, 256, 4, 4, 2, 4096), ("llama", 64, 128, 1, 2, 1, 4096)),
}
# default scaling (widths ÷ scale, layers ÷ layer_scale, vocab ÷ vocab_scale) so one forward is milliseconds on CPU
DEFAULT_SCALE = {"qwen-0.5b/1.5b": (4, 4, 4), "llama2-7b/68m": (8, 4, 1), "tiny": (1, 1, 1)}
DEFAULT_MIX = {"qwen-0.5b/1.5b": 1.0, "llama2-7b/68m": 1.0, "tiny": 1.0}


def scaled_config(spec: tuple, scale: int, layer_scale: int, vocab_scale: int):
    """An HF config for one model of a pair: widths ÷ scale (head size kept), layers ÷ layer_scale."""
    from transformers import AutoConfig

    kind, hidden, inter, layers, heads, kv, vocab = spec
    head_dim = hidden // heads
    heads_s = max(1, round(heads / scale))
    kv_s = max(1, min(heads_s, round(kv / scale)))
    while heads_s % kv_s:
        kv_s -= 1
    return AutoConfig.for_model(kind, hidden_size=heads_s * head_dim, intermediate_size=max(8, inter // scale),
                                num_hidden_layers=max(1, math.ceil(layers / layer_scale)),
                                num_attention_heads=heads_s, num_key_value_heads=kv_s, head_dim=head_dim,
                                vocab_size=vocab // vocab_scale, max_position_embeddings=4096,
                                tie_word_embeddings=False)


@torch.no_grad()
def build_models(shape: str, mix: float | None = None, scale: tuple[int, int, int] | None = None,
                 dtype: torch.dtype = torch.float32, seed: int = 0, logit_std: float = 4.0):
    """(target, draft) HF causal LMs with random weights sharing a bigram path (module docstring)."""
    from transformers import AutoModelForCausalLM

    if shape not in SHAPES:
        raise ValueError(f"unknown shape '{shape}'; valid: {', '.join(SHAPES)}")
    mix = DEFAULT_MIX[shape] if mix is None else mix
    scale = DEFAULT_SCALE[shape] if scale is None else scale
    t_cfg, d_cfg = (scaled_config(s, *scale) for s in SHAPES[shape])
    torch.manual_seed(seed)
    target = AutoModelForCausalLM.from_config(t_cfg).eval()
    draft = AutoModelForCausalLM.from_config(d_cfg).eval()
    d_t, d_d, vocab = t_cfg.hidden_size, d_cfg.hidden_size, t_cfg.vocab_size
    if d_d > d_t:
        raise ValueError("the draft must not be wider than the target")
    q, _ = torch.linalg.qr(torch.randn(d_t, d_d))  # orthonormal columns: the draft's space inside the target's
    emb = torch.randn(vocab, d_d)
    head = torch.randn(vocab, d_d) * logit_std / math.sqrt(d_d)  # logits ≈ N(0, logit_std²) at unit-RMS input
    draft.model.embed_tokens.weight.copy_(emb)
    target.model.embed_tokens.weight.copy_(emb @ q.T)
    # RMSNorm divides by rms over the hidden size: the target's unit-RMS input is √(d_t/d_d) times smaller
    draft.lm_head.weight.copy_(head)
    target.lm_head.weight.copy_(head @ q.T * math.sqrt(d_d / d_t))
    for model in (target, draft):
        for layer in model.model.layers:
            layer.self_attn.o_proj.weight.mul_(mix)
            layer.mlp.down_proj.weight.mul_(mix)
    return target.to(dtype), draft.to(dtype)


def synthetic_pair(shape: str, mix: float | None = None, scale: tuple[int, int, int] | None = None,
                   dtype: str = "float32", seed: int = 0):
    """A :class:`harness.models.ModelPair` of :func:`build_models` with a toy tokenizer (no EOS)."""
    from harness.models import ModelPair
    from harness.testing import ToyTokenizer

    torch_dtype = getattr(torch, dtype)
    target, draft = build_models(shape, mix, scale, torch_dtype, seed)
    return ModelPair(target=target, draft=draft, tokenizer=ToyTokenizer(target.config.vocab_size), name=shape,
                     target_id=f"synthetic/{shape}/target", draft_id=f"synthetic/{shape}/draft", dtype=dtype)


def random_prompts(vocab: int, n: int, length: int, seed: int = 0) -> list[list[int]]:
    g = torch.Generator().manual_seed(seed)
    return [torch.randint(0, vocab, (length,), generator=g).tolist() for _ in range(n)]
