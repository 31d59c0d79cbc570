"""EAGLE-2 (Li et al. 2024, arXiv:2406.16858): EAGLE's feature-level draft head with a dynamic draft tree.

The head (EAGLE, arXiv:2401.15077; :mod:`harness.heads.eagle`) pairs each target feature f_i (the target's last
hidden state) with the embedding of the token after it and predicts the next feature through one decoder layer;
the target's own LM head turns it into a draft distribution. Each round grows a tree below the stem (the last
committed token) by confidence: the ``top_k`` children of each of the ``top_k`` most confident frontier nodes,
level by level to ``depth``, scored by their paths' cumulative draft log-probability; then re-ranked, the
``total_tokens`` best nodes kept (EAGLE-2 §4; :func:`~harness.heads.eagle.eagle_draft_tree`). ONE target forward
verifies ``[stem] + tree`` and yields the features of the stem and the accepted nodes, which the head's KV cache
takes in the next round (it only ever holds committed pairs, so it needs no rollback). Lossless: the tree is a
deterministic function of the committed context, accepted by the point-mass rule when sampling (EAGLE's
``evaluate_posterior``) and by the target's argmax when greedy.

Params (EAGLE-2's code defaults total_token 60, depth 5, top_k 10 in its own counting): ``tree_top_k`` 10 (named
apart from the decoding's warp ``top_k``), ``depth`` 6 the deepest path here (the reference's depth + 1),
``total_tokens`` 59 the draft nodes without the stem. ``depth`` is the
round's γ: a γ policy may choose it per round (adaptive App. C.4: EAGLE-2 with adaptive depth); ``total_tokens``
is then clipped to what a shallower tree can hold. The head's calls (``depth`` per round) are the draft calls.
"""
from __future__ import annotations

import torch

from harness.decoders.base import register
from harness.decoders.head_drafting import HeadDecoder
from harness.decoders.params.eagle2 import Eagle2Params
from harness.heads.eagle import check_parents_kept, eagle_draft_tree, load_eagle, new_head_cache
from harness.primitives.device import upload
from harness.primitives.spec_state import DraftTree


@register
class Eagle2(HeadDecoder[Eagle2Params]):
    method = "eagle2"
    lossless = True

    def load_head(self, ref, dtype, device):
        head = load_eagle(ref, dtype, device)
        self.check_fits(ref, "EAGLE head", int(head.config.hidden_size))
        return head

    def begin(self, spec):
        spec.state = new_head_cache(self.head.module)  # the committed feature/token pairs, across rounds

    def propose(self, spec, depth):
        if spec.hidden is None or depth == 0:
            return self.no_draft(spec)
        k = spec.hidden.size(0)
        features = spec.hidden[None]
        tokens = spec.hidden_tokens  # the tokens after the features, on the device
        if tokens is None or tokens.size(1) != k:
            tokens = upload([spec.tokens[-k:]], features.device)
        target = self.pair.target
        tree = eagle_draft_tree(self.head, target.get_input_embeddings(), target.get_output_embeddings(), features,
                                tokens, top_k=self.params.tree_top_k, depth=depth,
                                total_tokens=self.params.nodes(depth), cache=spec.state,
                                vocab_size=self.pair.vocab_size)
        shape = torch.cat([tree.parents, tree.depths]).tolist()  # the tree's shape in one read
        n = tree.parents.numel()
        parents, depths = shape[:n], shape[n:]
        check_parents_kept(parents, depths)
        return DraftTree(tree.tokens, parents, None, None, 0, depth=max(depths))
