"""Medusa heads (Cai et al. 2024, arXiv:2401.10774): extra decoding heads on the target's last hidden state.

Head k (0-based) reads the target's last hidden state h_t (after the final norm, the LM head's
input) and predicts the token at t + k + 2: the target's own LM head gives t + 1, the heads the
tokens after it. Each head is ``num_layers`` applications of one residual block (shared weights, as
the reference builds it, :mod:`harness.heads.resnet`) followed by its own vocabulary projection
without bias.

Checkpoint layout (FasterDecoding/Medusa, e.g. ``FasterDecoding/medusa-vicuna-7b-v1.3``):
``config.json`` with ``medusa_num_heads``, ``medusa_num_layers`` and ``base_model_name_or_path``,
and the heads' state dict (keys ``{k}.{j}.linear.weight``/``.bias`` for j < num_layers and
``{k}.{num_layers}.weight``) as ``medusa_lm_head.safetensors`` or ``medusa_lm_head.pt``. The number
of heads is read from the weights: published configs can name fewer heads than the file holds (the
reference's loader notes its 7B config says 2 where the weights have 5 and overrides it); the
config's number is kept as ``config_num_heads``.

Tree candidates. Medusa verifies a fixed sparse tree (its "medusa choices"): each choice is a path of
ranks, ``(r_1, ..., r_d)`` = the r_1-th most likely token of head 0, then the r_2-th of head 1, and so
on, hanging off the token the target itself chose (the *stem*, in :mod:`harness.primitives.tree`'s
words). :func:`medusa_tree` turns a choice list into parent indices in that module's convention
(−1: a child of the stem) and :func:`medusa_tree_tokens` fills a tree with the heads' top tokens.
:data:`MC_SIM_7B_63` is the reference's default tree (63 nodes, depth ≤ 4, ``mc_sim_7b_63`` in its
``medusa_choices.py``), kept as data.
"""
from __future__ import annotations

import warnings
from dataclasses import dataclass
from functools import lru_cache

import torch
from torch import nn

from harness.errors import ConfigError, HarnessError
from harness.heads.checkpoints import check_keys, read_config, read_weights, write_checkpoint
from harness.heads.resnet import load_residual_stack, residual_stack, stack_keys

WEIGHTS_NAMES = ("medusa_lm_head.safetensors", "medusa_lm_head.pt")

# FasterDecoding/Medusa, medusa/model/medusa_choices.py: mc_sim_7b_63 (the default when no model-specific tree fits)
MC_SIM_7B_63: tuple[tuple[int, ...], ...] = (
    (0,), (0, 0), (1,), (0, 1), (2,), (0, 0, 0), (1, 0), (0, 2), (3,), (0, 3), (4,), (0, 4), (2, 0), (0, 5),
    (0, 0, 1), (5,), (0, 6), (6,), (0, 7), (0, 1, 0), (1, 1), (7,), (0, 8), (0, 0, 2), (3, 0), (0, 9), (8,),
    (9,), (1, 0, 0), (0, 2, 0), (1, 2), (0, 0, 3), (4, 0), (2, 1), (0, 0, 4), (0, 0, 5), (0, 0, 0, 0),
    (0, 1, 1), (0, 0, 6), (0, 3, 0), (5, 0), (1, 3), (0, 0, 7), (0, 0, 8), (0, 0, 9), (6, 0), (0, 4, 0),
    (1, 4), (7, 0), (0, 1, 2), (2, 0, 0), (3, 1), (2, 2), (8, 0), (0, 5, 0), (1, 5), (1, 0, 1), (0, 2, 1),
    (9, 0), (0, 6, 0), (0, 0, 0, 1), (1, 6), (0, 7, 0),
)


@dataclass(frozen=True)
class MedusaConfig:
    num_heads: int
    num_layers: int
    hidden_size: int
    vocab_size: int
    base_model_name_or_path: str | None = None
    config_num_heads: int | None = None  # what config.json said, when it differs from the weights

    def to_json(self) -> dict:
        """config.json in the reference's keys (plus the sizes, which the reference takes from the base model)."""
        return {"medusa_num_heads": self.num_heads, "medusa_num_layers": self.num_layers,
                "base_model_name_or_path": self.base_model_name_or_path, "hidden_size": self.hidden_size,
                "vocab_size": self.vocab_size}


class MedusaHeads(nn.Module):
    """K Medusa heads: ``forward(hidden (..., H)) -> logits (K, ..., V)``; head k predicts t + k + 2."""

    def __init__(self, config: MedusaConfig, zero_init: bool = True):
        super().__init__()
        self.config = config
        self.medusa_head = nn.ModuleList(
            residual_stack(config.hidden_size, config.num_layers, config.vocab_size, bias=False, zero_init=zero_init)
            for _ in range(config.num_heads))

    def forward(self, hidden: torch.Tensor) -> torch.Tensor:
        return torch.stack([head(hidden) for head in self.medusa_head])

    def save_pretrained(self, directory, dtype: torch.dtype = torch.float16, extra: dict | None = None):
        """Write the published layout (``config.json`` + ``medusa_lm_head.safetensors``)."""
        return write_checkpoint(directory, {**self.config.to_json(), **(extra or {})}, self.medusa_head,
                                WEIGHTS_NAMES[0], dtype)


def _count_heads(state: dict) -> int:
    heads = {int(k.split(".", 1)[0]) for k in state if k.split(".", 1)[0].isdigit()}
    if not heads or heads != set(range(len(heads))):
        raise HarnessError(f"Medusa weights name heads {sorted(heads)}; expected 0 … K−1")
    return len(heads)


def load_medusa(ref: str, dtype: torch.dtype = torch.float32, device: str | torch.device = "cpu") -> MedusaHeads:
    """Medusa heads from ``tiny/medusa``, a local directory or a hub id (``medusa_lm_head.safetensors`` or ``.pt``)."""
    cfg = read_config(ref)
    if "medusa_num_layers" not in cfg:
        raise HarnessError(f"'{ref}' is no Medusa checkpoint: its config.json has no medusa_num_layers")
    state = read_weights(ref, WEIGHTS_NAMES)
    num_heads, num_layers = _count_heads(state), int(cfg["medusa_num_layers"])
    out = state.get(f"0.{num_layers}.weight")
    if out is None:
        raise HarnessError(f"head checkpoint '{ref}' lacks 0.{num_layers}.weight (medusa_num_layers={num_layers})")
    said = cfg.get("medusa_num_heads")
    if said is not None and int(said) != num_heads:
        warnings.warn(f"Medusa checkpoint '{ref}': config.json says medusa_num_heads={said}, the weights hold "
                      f"{num_heads} heads; using {num_heads}", stacklevel=2)
    config = MedusaConfig(num_heads=num_heads, num_layers=num_layers, hidden_size=out.shape[1],
                          vocab_size=out.shape[0], base_model_name_or_path=cfg.get("base_model_name_or_path"),
                          config_num_heads=None if said is None or int(said) == num_heads else int(said))
    check_keys(ref, state, set().union(*(stack_keys(f"{k}.", num_layers, False) for k in range(num_heads))))
    heads = MedusaHeads(config, zero_init=False)
    for k, stack in enumerate(heads.medusa_head):
        load_residual_stack(stack, state, f"{k}.", ref)
    return heads.to(device=device, dtype=dtype).eval()


@dataclass(frozen=True)
class MedusaTree:
    """A static Medusa tree: node i is the ``ranks[i]``-th token of head ``depths[i] − 1``, below ``parents[i]``."""

    choices: tuple[tuple[int, ...], ...]  # the paths, sorted as the nodes are (by depth, then path)
    parents: tuple[int, ...]  # −1: a child of the stem (the token the target chose)
    depths: tuple[int, ...]  # 1 = head 0
    ranks: tuple[int, ...]

    @property
    def top_k(self) -> int:
        """How many of each head's top tokens the tree uses."""
        return max(self.ranks) + 1 if self.ranks else 0


def medusa_tree(choices, num_heads: int | None = None) -> MedusaTree:
    """The tree of a medusa-choices list, nodes sorted by (depth, path) as the reference sorts them.

    ``num_heads``: drop paths deeper than the heads there are (a 4-deep default tree on 3 heads).
    Every path's proper prefixes must be paths too (a node needs its parent)."""
    paths = sorted({tuple(int(r) for r in c) for c in choices}, key=lambda p: (len(p), p))
    if num_heads is not None:
        paths = [p for p in paths if len(p) <= num_heads]
    if not paths or any(len(p) == 0 or min(p) < 0 for p in paths):
        raise ConfigError(f"medusa choices must be non-empty paths of ranks >= 0, got {list(choices)[:5]}")
    index = {p: i for i, p in enumerate(paths)}
    missing = sorted({p[:-1] for p in paths if len(p) > 1} - set(index))
    if missing:
        raise ConfigError(f"medusa choices lack the parents {missing[:5]} of some of their paths")
    return MedusaTree(choices=tuple(paths), parents=tuple(index[p[:-1]] if len(p) > 1 else -1 for p in paths),
                      depths=tuple(len(p) for p in paths), ranks=tuple(p[-1] for p in paths))


def medusa_tree_tokens(tree: MedusaTree, head_logits: torch.Tensor) -> torch.Tensor:
    """The tree's tokens (N,) from the heads' logits at the stem's position, ``head_logits`` (K, V)."""
    if max(tree.depths) > head_logits.size(0):
        raise ConfigError(f"the tree is {max(tree.depths)} deep but there are only {head_logits.size(0)} heads")
    top = torch.topk(head_logits, tree.top_k, dim=-1).indices  # (K, top_k)
    return top.reshape(-1).index_select(0, _flat_index(tree, str(top.device)))


@lru_cache(maxsize=8)
def _flat_index(tree: MedusaTree, device: str) -> torch.Tensor:
    """(N,) each node's (head, rank) as an index into the heads' flattened top-k: copied to the device once per
    tree, not per round (issue 28 item 2)."""
    return torch.tensor([(d - 1) * tree.top_k + r for d, r in zip(tree.depths, tree.ranks)], dtype=torch.long,
                        device=device)
