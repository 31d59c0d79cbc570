"""EAGLE's feature-level draft head (Li et al. 2024, arXiv:2401.15077) and EAGLE-2's dynamic draft tree
(Li et al. 2024, arXiv:2406.16858, §4).

The head. The target's features f_i are its last hidden states (after the final norm: the LM head's
input). The head pairs feature f_i with the embedding of the token after it, e_{i+1} = E(x_{i+1}),
maps ``fc([e_{i+1}; f_i])`` (Linear 2H → H, with bias) through one decoder layer of the target's
family (here Llama; EAGLE-1/2's layer 0 has no input norm) and predicts f̂_{i+1}; the target's own LM
head turns f̂_{i+1} into the distribution of x_{i+2}. The embedding E and the LM head are the target's
(passed in, never copied). For drafting deeper, the head feeds on its own predicted features.

Checkpoint layout (SafeAILab/EAGLE, e.g. ``yuhuili/EAGLE-Vicuna-7B-v1.3``): ``config.json`` (a Llama
config with ``num_hidden_layers: 1``, optionally ``bias``) and ``pytorch_model.bin`` or
``model.safetensors`` with ``fc.weight``, ``fc.bias``, ``layers.0.*`` — published files also carry a
copy of the target's ``embed_tokens.weight``, which is ignored (the target's own embedding is used).

The draft tree (EAGLE-2 §4). Expansion: the head's top-k tokens after the stem (the last committed
token) are depth 1; at each further depth the k frontier nodes are fed to the head in one forward (tree
attention: each sees the prefix, its ancestors and itself), each gets its top-k children, every child
scores its path's cumulative draft log-probability (the product of confidences, the paper's value),
and the k best children by that score become the next frontier. Re-ranking: of all nodes generated,
the ``total_tokens`` best by score are kept (a stable sort, so a parent — never scored below its child —
always precedes it), in generation order, which is topological. :func:`eagle_draft_tree` does both
and returns tokens, parent indices (−1: a child of the stem, as in :mod:`harness.primitives.tree`),
scores and depths; the decoder only verifies.

Parameters, against the reference code's (``cnets1.py``): ``depth`` here is the deepest a path can be
(the reference's ``depth`` + 1), ``total_tokens`` counts draft nodes without the stem (the reference's
``total_token`` − 1). EAGLE-2's code defaults (total_token 60, depth 5, top_k 10) are therefore
:data:`DEFAULT_TOTAL_TOKENS` = 59, :data:`DEFAULT_DEPTH` = 6, :data:`DEFAULT_TOP_K` = 10.
"""
from __future__ import annotations

from dataclasses import dataclass

import torch
from torch import nn

from harness.heads.defaults import DEFAULT_DEPTH, DEFAULT_TOP_K, DEFAULT_TOTAL_TOKENS, check_tree_params
from harness.errors import HarnessError
from harness.heads.checkpoints import check_keys, read_config, read_weights, write_checkpoint
from harness.primitives.kv_cache import cache_length, new_cache, truncate

WEIGHTS_NAMES = ("model.safetensors", "pytorch_model.bin")


def _decoder_layer(config, index: int) -> nn.Module:
    from transformers.models.llama.modeling_llama import LlamaDecoderLayer

    layer = LlamaDecoderLayer(config, index)
    if index == 0:  # EAGLE-1/2: the first layer takes fc's output without an input norm
        layer.input_layernorm = nn.Identity()
    return layer


class EagleHead(nn.Module):
    """fc over [token embedding; target feature] + Llama decoder layer(s): predicts the next feature."""

    def __init__(self, config, bias: bool = True):
        from transformers.models.llama.modeling_llama import LlamaRotaryEmbedding

        super().__init__()
        if getattr(config, "_attn_implementation", None) is None:
            config._attn_implementation = "sdpa"
        self.config, self.bias = config, bias
        hidden = config.hidden_size
        self.fc = nn.Linear(2 * hidden, hidden, bias=bias)
        self.layers = nn.ModuleList(_decoder_layer(config, i) for i in range(config.num_hidden_layers))
        self.rotary = LlamaRotaryEmbedding(config)  # buffers only, not in the state dict

    def forward(self, features: torch.Tensor, embeds: torch.Tensor, position_ids: torch.Tensor,
                attention_mask: torch.Tensor, cache=None) -> torch.Tensor:
        """features, embeds (B, T, H); position_ids (B, T); attention_mask additive (B or 1, 1, T, past + T)."""
        x = self.fc(torch.cat([embeds.to(features.dtype), features], dim=-1))
        rope = self.rotary(x, position_ids)
        for layer in self.layers:  # cache and use_cache by position: their keyword changed names across 5.x
            x = layer(x, attention_mask, position_ids, cache, cache is not None, position_embeddings=rope)
        return x

    def save_pretrained(self, directory, dtype: torch.dtype = torch.float16, extra: dict | None = None):
        """Write the published layout (``config.json`` + ``model.safetensors``, no embedding copy)."""
        config = {"architectures": ["LlamaForCausalLM"], **self.config.to_diff_dict(), "bias": self.bias,
                  **(extra or {})}
        config.pop("_name_or_path", None)
        config["dtype"] = str(dtype).removeprefix("torch.")
        return write_checkpoint(directory, config, self, WEIGHTS_NAMES[0], dtype)


def new_head_cache(head: EagleHead):
    """An empty KV cache for the head (it keeps the prefix's feature/token pairs between rounds): in the ``graphs``
    execution mode (a runner attached to the head) a static one, whose calls the runner buckets and captures."""
    return new_cache(head)


def load_eagle(ref: str, dtype: torch.dtype = torch.float32, device: str | torch.device = "cpu") -> EagleHead:
    """An EAGLE(-2) head from ``tiny/eagle``, a local directory or a hub id."""
    from transformers import LlamaConfig

    cfg = read_config(ref)
    lacking = [k for k in ("hidden_size", "intermediate_size", "num_attention_heads", "num_hidden_layers")
               if k not in cfg]
    if lacking:
        raise HarnessError(f"'{ref}' is no EAGLE head: its config.json lacks {', '.join(lacking)}")
    state = read_weights(ref, WEIGHTS_NAMES)
    hidden, layers = int(cfg["hidden_size"]), int(cfg["num_hidden_layers"])
    fc = state.get("fc.weight")
    found = {int(k.split(".")[1]) for k in state if k.startswith("layers.")}
    if fc is None or tuple(fc.shape) != (hidden, 2 * hidden) or found != set(range(layers)):
        raise HarnessError(f"head checkpoint '{ref}' is not an EAGLE head of its config (hidden_size {hidden}, "
                           f"{layers} layer(s)): fc.weight {None if fc is None else tuple(fc.shape)}, "
                           f"layers {sorted(found)}")
    bias = bool(cfg.get("bias", True))
    head = EagleHead(LlamaConfig(**{k: v for k, v in cfg.items() if k != "bias"}), bias=bias)
    expected = set(head.state_dict())
    check_keys(ref, state, expected, expected, ignored=("embed_tokens.",))
    head.load_state_dict({k: v for k, v in state.items() if not k.startswith("embed_tokens.")}, strict=True)
    return head.to(device=device, dtype=dtype).eval()


def additive_mask(allowed: torch.Tensor, dtype: torch.dtype) -> torch.Tensor:
    """(T, S) bool → (1, 1, T, S) additive mask: 0 where allowed, the dtype's minimum elsewhere."""
    mask = torch.zeros(allowed.shape, dtype=dtype, device=allowed.device)
    return mask.masked_fill(~allowed, torch.finfo(dtype).min)[None, None]


def causal_mask(length: int, past: int, dtype: torch.dtype, device=None) -> torch.Tensor:
    """Positions past … past+length−1 see everything before them and themselves."""
    allowed = torch.ones(length, past + length, dtype=torch.bool, device=device).tril(past)
    return additive_mask(allowed, dtype)


@dataclass(frozen=True)
class EagleTree:
    """A draft tree in topological order: node i is ``tokens[i]`` below ``parents[i]`` (−1: the stem)."""

    tokens: torch.Tensor  # (N,) long
    parents: torch.Tensor  # (N,) long
    scores: torch.Tensor  # (N,) float: cumulative draft log-probability of the path stem → node
    depths: torch.Tensor  # (N,) long, 1 = child of the stem


def rerank(tokens: torch.Tensor, parents: torch.Tensor, scores: torch.Tensor, depths: torch.Tensor,
           total_tokens: int, check: bool = True) -> EagleTree:
    """EAGLE-2's re-ranking: keep the ``total_tokens`` nodes of highest score, in their original order.

    The input is every generated node in generation order (parents first). Ties are broken by that
    order (stable sort), so a kept node's parent, whose score is never lower, is always kept too (``check``:
    asserted here, a host read; without it the caller checks where it reads the tree: a node is a root iff its
    depth is 1, :func:`check_parents_kept`)."""
    order = torch.sort(scores, descending=True, stable=True).indices[:total_tokens]
    keep = torch.sort(order).values
    remap = torch.full((tokens.numel(),), -1, dtype=torch.long, device=tokens.device)
    remap[keep] = torch.arange(keep.numel(), device=tokens.device)
    old = parents[keep]
    new = torch.where(old >= 0, remap[old.clamp_min(0)], old)
    if check and bool(((old >= 0) & (new < 0)).any()):
        raise AssertionError("re-ranking dropped the parent of a kept node")
    return EagleTree(tokens[keep], new, scores[keep], depths[keep])


def check_parents_kept(parents: list[int], depths: list[int]) -> None:
    """:func:`rerank`'s invariant on a tree read to the host: a node is a root (parent −1) iff its depth is 1."""
    if any((p < 0) != (d == 1) for p, d in zip(parents, depths)):
        raise AssertionError("re-ranking dropped the parent of a kept node")


def _log_probs(lm_head: nn.Module, hidden: torch.Tensor, vocab_size: int | None) -> torch.Tensor:
    logits = lm_head(hidden)
    return torch.log_softmax(logits[..., :vocab_size].float(), dim=-1)


@torch.no_grad()
def eagle_draft_tree(head: EagleHead, embed: nn.Module, lm_head: nn.Module, features: torch.Tensor,
                     tokens: torch.Tensor, *, top_k: int = DEFAULT_TOP_K, depth: int = DEFAULT_DEPTH,
                     total_tokens: int = DEFAULT_TOTAL_TOKENS, cache=None, vocab_size: int | None = None) -> EagleTree:
    """EAGLE-2's draft tree after a prefix (expansion by confidence, then re-ranking; see the module doc).

    The prefix is n feature/token pairs (f_i, x_{i+1}), i = 0 … n − 1: the target's feature at position i
    and the token after it; x_n is the stem (the last committed token, whose own feature is not known
    yet). ``features`` (1, m, H) and ``tokens`` (1, m) are the last m of these pairs: those not yet in
    the head's KV ``cache`` (all n without one). The cache keeps the prefix pairs between rounds; on
    return it holds exactly the n prefix pairs again (the tree's nodes are dropped). After verification
    the caller appends the new pairs (exact target features of the stem and the accepted tokens, each
    with the token after it) in the next call; the cache needs no rollback, since every pair in it is
    committed."""
    check_tree_params(top_k, depth, total_tokens)
    m = features.size(1)
    if tokens.shape != (1, m) or features.size(0) != 1 or m == 0:
        raise ValueError(f"features (1, m, H) and tokens (1, m), m >= 1, expected, got {tuple(features.shape)} "
                         f"and {tuple(tokens.shape)}")
    cache = new_head_cache(head) if cache is None else cache
    past = cache_length(cache)
    n, dtype, device = past + m, features.dtype, features.device
    out = head(features=features, embeds=embed(tokens), position_ids=torch.arange(past, n, device=device)[None],
               attention_mask=causal_mask(m, past, dtype, device), cache=cache)
    logp = _log_probs(lm_head, out[0, -1], vocab_size)
    top = torch.topk(logp, min(top_k, logp.size(-1)))
    pool_tokens, pool_scores = [top.indices], [top.values]
    pool_parents = [torch.full_like(top.indices, -1)]
    k = top.indices.numel()
    frontier = torch.arange(k, device=device)  # pool indices of the nodes to feed next
    front_tok, front_score, front_in = top.indices, top.values, out[0, -1].expand(k, -1)
    tree_allowed = torch.eye(k, dtype=torch.bool, device=device)  # frontier rows × tree nodes fed so far
    for level in range(1, depth):
        allowed = torch.cat([torch.ones(k, n, dtype=torch.bool, device=device), tree_allowed], dim=1)
        out = head(features=front_in[None], embeds=embed(front_tok[None]),
                   position_ids=torch.full((1, k), n + level - 1, device=device),
                   attention_mask=additive_mask(allowed, dtype), cache=cache)[0]
        child = torch.topk(_log_probs(lm_head, out, vocab_size), k, dim=-1)  # (k, k)
        cum = (front_score[:, None] + child.values).flatten()
        base = sum(t.numel() for t in pool_tokens)
        pool_tokens.append(child.indices.flatten())
        pool_scores.append(cum)
        pool_parents.append(frontier.repeat_interleave(k))
        best = torch.sort(cum, descending=True, stable=True).indices[:k]
        rows = best // k  # the frontier row each new frontier node hangs below
        frontier, front_tok, front_score, front_in = base + best, child.indices.flatten()[best], cum[best], out[rows]
        tree_allowed = torch.cat([tree_allowed[rows], torch.eye(k, dtype=torch.bool, device=device)], dim=1)
    truncate(cache, n)
    depths = torch.cat([torch.full_like(t, d + 1) for d, t in enumerate(pool_tokens)])
    return rerank(torch.cat(pool_tokens), torch.cat(pool_parents), torch.cat(pool_scores), depths, total_tokens,
                  check=False)  # the caller checks the kept parents where it reads the tree (check_parents_kept)
