"""Random-weight pairs built on the device from a config: no download, no checkpoint (issue 28.5). A leaf below
:mod:`harness.models` (which loads them for ``random/...`` references), beside the other model-level primitives.

A model reference ``random/<shape>`` is a target of that shape (:data:`SHAPES`: ``llama2-7b`` is Llama-2-7B's
public config; ``mini`` a small one for CPU runs) with random weights; ``random/<shape>/first<N>`` is a draft cut
from that target: its first N decoder layers plus its embeddings, final norm and LM head — the same tensors, so
the draft costs no memory. The tokenizer is the embedded tiny pair's (:data:`TOKENIZER`): the LM head keeps the
shape's vocabulary (its full cost), its rows past the tokenizer's vocabulary are zero (never the argmax: the
pair's logits are cut to the tokenizer, as for a checkpoint whose embeddings are padded).

The weights are drawn so that the shape, not the draw, decides the behaviour: every linear map N(0, 1/fan_in),
embeddings N(0, 1), LM head rows N(0, (LOGIT_STD)²/hidden) — logits of standard deviation about LOGIT_STD after
the final norm, peaked as a trained model's — and the residual writes (``o_proj``, ``down_proj``) of every layer
past the first :data:`DRAFT_LAYERS` scaled by :data:`DEEP_SCALE`, so that the deep layers refine what the first
ones wrote and a draft cut after them agrees with the target at a realistic rate. Calibrated on a CPU with a
32-layer, 256-wide, 32000-token shape drawn this way (4 prompts × 24 greedy tokens of the target; the draws are
width-invariant by construction): DEEP_SCALE 0.05 / 0.10 / 0.15 / 0.25 gave greedy agreement 0.76 / 0.52 / 0.39 /
0.15 and sampling acceptance Σ min(p, q) 0.81 / 0.65 / 0.51 / 0.27 (target entropy ≈ 3 nats); 0.08 is taken
(≈ 0.6 / 0.7, near a 68M draft's for Llama-2-7B). The acceptance a run measured is in its results.
"""
from __future__ import annotations

import re

import torch

from harness.errors import ConfigError

PREFIX = "random/"
TOKENIZER = "tiny/target"
# Llama-2-7B's public config (also the cost curves' 7B shape: harness.tools.cost_curves)
LLAMA2_7B = {"model_type": "llama", "hidden_size": 4096, "intermediate_size": 11008, "num_hidden_layers": 32,
             "num_attention_heads": 32, "num_key_value_heads": 32, "vocab_size": 32000, "max_position_embeddings": 4096}
SHAPES = {
    "llama2-7b": LLAMA2_7B,
    "mini": {"model_type": "llama", "hidden_size": 256, "intermediate_size": 688, "num_hidden_layers": 8,
             "num_attention_heads": 8, "num_key_value_heads": 8, "vocab_size": 8192, "max_position_embeddings": 1024},
}
DRAFT_LAYERS = 2  # the layers a draft keeps (first<N> may say otherwise; the scaling assumes 2)
DEEP_SCALE = 0.08  # residual writes of the layers past DRAFT_LAYERS (calibrated: module docstring)
LOGIT_STD = 4.0
SEED = 0
_REF = re.compile(r"^random/(?P<shape>[A-Za-z0-9._-]+?)(?:/first(?P<layers>\d+))?$")


def is_random(ref) -> bool:
    return isinstance(ref, str) and ref.startswith(PREFIX)


def parse(ref: str, key: str = "pair.target") -> tuple[str, int | None]:
    """(shape, draft layers or None) of a ``random/...`` reference, or a :class:`ConfigError`."""
    m = _REF.match(ref)
    if not m or m["shape"] not in SHAPES:
        raise ConfigError(f"{key}: '{ref}' is no random model; valid: random/<shape> or random/<shape>/first<N>, "
                          f"shapes: {', '.join(SHAPES)}", key=key)
    layers = int(m["layers"]) if m["layers"] is not None else None
    if layers is not None and not 1 <= layers < SHAPES[m["shape"]]["num_hidden_layers"]:
        raise ConfigError(f"{key}: '{ref}' keeps {layers} layers; valid 1..{SHAPES[m['shape']]['num_hidden_layers'] - 1}",
                          key=key)
    return m["shape"], layers


def check_pair(target: str, drafts: list[str]) -> None:
    """A random draft is cut from a random target of its shape."""
    for d in drafts:
        if is_random(d):
            shape, layers = parse(d, "pair.draft")
            if layers is None or not is_random(target) or parse(target)[0] != shape:
                raise ConfigError(f"pair.draft '{d}' must be random/<shape>/first<N> cut from the target "
                                  f"random/<shape> (target: '{target}')", key="pair.draft")


def config_of(ref: str):
    """The transformers config a ``random/...`` reference builds (a draft: its layers only)."""
    from transformers import AutoConfig

    shape, layers = parse(ref)
    spec = dict(SHAPES[shape])
    config = AutoConfig.for_model(spec.pop("model_type"), **spec)
    if layers is not None:
        config.num_hidden_layers = layers
    return config


def build_target(ref: str, dtype: torch.dtype, device, vocab: int) -> torch.nn.Module:
    """The target of ``random/<shape>``: built on ``device`` in ``dtype``, weights drawn as the module says; LM head
    rows from ``vocab`` (the tokenizer's size) on are zero."""
    from transformers import AutoModelForCausalLM

    config = config_of(ref)
    with torch.device(device):
        model = AutoModelForCausalLM.from_config(config, dtype=dtype)
    gen = torch.Generator(device=device).manual_seed(SEED)
    with torch.no_grad():
        for name, p in model.named_parameters():
            if p.dim() == 1:
                continue  # norms stay 1
            std = 1.0 if "embed_tokens" in name else p.shape[1] ** -0.5
            if "lm_head" in name:
                std *= LOGIT_STD
            p.copy_(torch.randn(p.shape, generator=gen, device=device, dtype=torch.float32).mul_(std))
        for layer in model.model.layers[DRAFT_LAYERS:]:
            layer.self_attn.o_proj.weight.mul_(DEEP_SCALE)
            layer.mlp.down_proj.weight.mul_(DEEP_SCALE)
        model.lm_head.weight[vocab:].zero_()
    return model.eval()


def cut_draft(target: torch.nn.Module, ref: str) -> torch.nn.Module:
    """The draft ``random/<shape>/first<N>`` of ``target``: its first N layers, embeddings, norm and head (shared)."""
    from transformers import AutoModelForCausalLM

    _, layers = parse(ref, "pair.draft")
    config = config_of(ref)
    with torch.device("meta"):
        draft = AutoModelForCausalLM.from_config(config, dtype=target.dtype)
    draft.model.embed_tokens = target.model.embed_tokens
    draft.model.layers = torch.nn.ModuleList(target.model.layers[:layers])
    draft.model.norm = target.model.norm
    draft.model.rotary_emb = target.model.rotary_emb
    draft.lm_head = target.lm_head
    return draft.eval()
