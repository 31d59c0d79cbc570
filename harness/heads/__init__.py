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

The names below load their module (and torch) when first used: :mod:`harness.heads.defaults` is torch-free.
"""
from __future__ import annotations

import importlib
from typing import Any

_MODULES = {"checkpoints": ("EMBEDDED_HEADS", "resolve_head"),
            "eagle": ("EagleHead", "EagleTree", "eagle_draft_tree", "load_eagle"),
            "medusa": ("MC_SIM_7B_63", "MedusaConfig", "MedusaHeads", "load_medusa", "medusa_tree",
                       "medusa_tree_tokens"),
            "specdecpp": ("AcceptanceHead", "SpecDecPPStop", "load_acceptance_head", "rejection_probability",
                          "stop_drafting")}
__all__ = [name for names in _MODULES.values() for name in names]


def __getattr__(name: str) -> Any:
    for module, names in _MODULES.items():
        if name in names:
            return getattr(importlib.import_module(f"{__name__}.{module}"), name)
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
