"""Spectr (Sun et al. 2023, "SpecTr: fast speculative decoding via optimal transport").

The draft samples m = ``num_drafts`` sequences of γ tokens i.i.d. from T∘q (merged into a token
tree and scored by the target in ONE forward, like SpecInfer); at each tree level the candidates —
the next tokens of the sequences that share the accepted prefix, i.i.d. from q̃ — go
through Spectr's k-sequential selection K-SEQ: accept candidate i with
min(1, p̃(x_i)/(ρ q̃(x_i))), ρ* the smallest ρ with 1 − (1 − β(ρ))^k ≤ ρβ(ρ),
β(ρ) = Σ min(q̃, p̃/ρ); if none is accepted, draw from p_res ∝ p̃ − min(q̃, p̃/ρ)(1 − (1 − β)^k)/β.
Exactly the target's distribution; the mtad paper (§5) uses it as a baseline with γ = 4, m ∈ {2, 4}.
"""
from __future__ import annotations

from harness.decoders.base import register
from harness.decoders.specinfer import SpecInfer
from harness.primitives.acceptance import k_sequential_select
from harness.primitives.spec_loop import TreeWalk


@register
class Spectr(SpecInfer):
    method = "spectr"
    accept = TreeWalk(k_sequential_select)
