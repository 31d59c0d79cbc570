"""Medusa (Cai et al. 2024, arXiv:2401.10774): K heads on the target's last hidden state draft a static token tree.

Head k reads the target's hidden state at the last committed position and predicts the token k + 2 ahead; the
tree (Medusa's "choices": paths of per-head ranks, :func:`~harness.heads.medusa.medusa_tree`) hangs the heads'
top tokens below the stem, the token the target itself chose. ONE target forward verifies ``[stem] + tree`` with
tree attention and returns the hidden states the heads read next round (the template's ``spec.hidden``; the
first round is the prefill, :mod:`harness.decoders.head_drafting`). ``medusa`` is lossless: the candidates are
deterministic, so sampling accepts them with the point-mass rule (:func:`~harness.primitives.acceptance.
point_mass_select`), greedy with the target's argmax. ``medusa_typical`` is Medusa's own lossy typical acceptance.

Params: ``heads`` (``tiny/medusa``, a Medusa checkpoint directory or hub id), ``choices`` (``mc_sim_7b_63``, the
reference's default tree, or a JSON list of paths), ``tree_nodes`` (keep the first N choices: the list is ordered
by importance). Paths deeper than the heads, or with ranks beyond the vocabulary, are dropped. γ_r of a round is
its tree's depth.
"""
from __future__ import annotations

from harness.decoders.base import register
from harness.decoders.head_drafting import HeadDecoder
from harness.decoders.params.medusa import MedusaParams
from harness.decoders.speculative import P
from harness.errors import ConfigError
from harness.heads.medusa import MedusaTree, load_medusa, medusa_tree, medusa_tree_tokens
from harness.primitives.spec_state import DraftTree
from harness.primitives.tree_attention import SlicedTreeMask

class MedusaDecoder(HeadDecoder[P]):
    """Medusa's drafting (module doc); subclasses choose the acceptance."""

    head_key = "heads"
    uses_gamma_policy = False  # the tree is static (its depth is γ)

    def load_head(self, ref, dtype, device):
        heads = load_medusa(ref, dtype, device)
        self.check_fits(ref, "Medusa head", heads.config.hidden_size, heads.config.vocab_size)
        vocab = self.pair.vocab_size
        paths = [p for p in self.params.paths if max(p) < vocab]  # a path's parents have no larger rank
        if not paths:
            raise ConfigError(f"method.choices: no path of the tree fits a vocabulary of {vocab} tokens")
        self.tree: MedusaTree = medusa_tree(paths, heads.config.num_heads)
        # the static tree's verification mask, built once and sliced at the round's depth (nodes sorted by depth)
        self.verify_mask = SlicedTreeMask(self.tree.parents, dtype=dtype, device=device)
        return heads

    def max_depth(self) -> int:
        return self.params.gamma

    def propose(self, spec, depth):
        if spec.hidden is None or depth == 0:
            return self.no_draft(spec)
        n = sum(1 for d in self.tree.depths if d <= depth)  # nodes are sorted by depth: a prefix
        head_logits = self.head(spec.hidden[-1])[..., : self.pair.vocab_size]  # (K, V)
        tokens = medusa_tree_tokens(self.tree, head_logits.float())[:n]
        return DraftTree(tokens, list(self.tree.parents[:n]), None, None, 0, depth=self.tree.depths[n - 1])

    def facts(self) -> dict:
        return {"medusa_heads": self.head.module.config.num_heads, "tree_nodes": len(self.tree.parents)}


@register
class Medusa(MedusaDecoder[MedusaParams]):
    method = "medusa"
    lossless = True
