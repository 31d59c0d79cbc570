"""Adaptive speculation (the adaptive paper): γ policies (§4), the analytic model (App. B), and draft-model
selection (§5). The estimators, the analytic model and the selection are pure Python/numpy; of the γ policies,
``specdecpp`` (SpecDec++) loads its trained acceptance head (:mod:`harness.heads.specdecpp`) and runs it with torch."""
