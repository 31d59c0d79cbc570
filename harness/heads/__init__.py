"""Trained draft heads of the methods the field compares against, as plain torch modules with loaders.

* :mod:`harness.heads.medusa` — Medusa's K heads on the target's last hidden state (Cai et al. 2024,
  arXiv:2401.10774), the static tree of its "medusa choices";
* :mod:`harness.heads.eagle` — EAGLE's feature-level draft head (Li et al. 2024, arXiv:2401.15077) and
  EAGLE-2's dynamic draft tree, expanded by confidence and re-ranked (arXiv:2406.16858);
* :mod:`harness.heads.specdecpp` — SpecDec++'s acceptance-prediction head on the draft's hidden state
  and its stop rule (Huang et al. 2024, arXiv:2405.19715).

Each loader reads its authors' published checkpoint layout from a hub id, a local directory, or an
embedded tiny head trained on the tiny pair's target (``tiny/medusa``, ``tiny/eagle``,
``tiny/specdecpp``: ``harness/assets/heads/``, trained by ``scripts/train_*_head*.py``). No decoding
loop lives here: the decoders verify what these heads propose.
"""
from harness.heads.checkpoints import EMBEDDED_HEADS, resolve_head
from harness.heads.eagle import EagleHead, EagleTree, eagle_draft_tree, load_eagle
from harness.heads.medusa import MC_SIM_7B_63, MedusaConfig, MedusaHeads, load_medusa, medusa_tree, medusa_tree_tokens
from harness.heads.specdecpp import AcceptanceHead, SpecDecPPStop, load_acceptance_head, rejection_probability, \
    stop_drafting

__all__ = ["EMBEDDED_HEADS", "resolve_head", "EagleHead", "EagleTree", "eagle_draft_tree", "load_eagle",
           "MC_SIM_7B_63", "MedusaConfig", "MedusaHeads", "load_medusa", "medusa_tree", "medusa_tree_tokens",
           "AcceptanceHead", "SpecDecPPStop", "load_acceptance_head", "rejection_probability", "stop_drafting"]
