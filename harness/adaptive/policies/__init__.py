"""γ policies of the adaptive paper's §4 (and HF's heuristic schedule), one module each, behind the γ-policy seam.

=============  =====================================================================  ==================
name           what                                                                   adaptive paper
=============  =====================================================================  ==================
fixed          γ every round (the default; no keys)                                   Alg. 1
online         maximise Eq. 1 over γ with a_q, b_p(γ) from measured times and Acc     §4.1, Eq. 1-2,
               by Eq. 2 (capped at Acc_max) or the exact MLE of App. B.2               App. B.1-B.3
fsm            saturating counter: +1 after a fully accepted round, −1 after a        §4.2
               rejection
cache_fsm      token cache seeded with the prompt: ±1 on whether the round's          §4.2
               validated tokens were already in the cache, +1 more when all accepted
qlearning      tabular Q-learning; state = previous γ values, action = next γ,        §4.2, Alg. 2
               reward = fraction of drafted tokens accepted; 25 warm-up trials         (App. B.4, C.1)
hf_heuristic   HF transformers' ``num_assistant_tokens_schedule="heuristic"``         (peer baseline)
specdecpp      SpecDec++: an acceptance head on the draft's hidden state ends the     Table 4 (baseline)
               round once P(a rejection) > threshold (inside the drafting; sd only)
=============  =====================================================================  ==================

Each is a frozen Params dataclass (:mod:`harness.adaptive.policies.base`) registered under its name:
the ``gamma_policy`` config group (``gamma_policy=online gamma_policy.acc_history=6``). A policy sees
only the past and always returns γ within [γ_min, γ_max].
"""
from harness.adaptive.policies.base import (GAMMA_INIT, GAMMA_LIMIT, GAMMA_MAX, GAMMA_MIN, POLICIES, BoundedParams,
                                            BoundedPolicy, PolicyParams, make_gamma_policy, policy_params,
                                            register_policy)

__all__ = ["GAMMA_INIT", "GAMMA_LIMIT", "GAMMA_MAX", "GAMMA_MIN", "POLICIES", "BoundedParams", "BoundedPolicy",
           "PolicyParams", "make_gamma_policy", "policy_params", "register_policy"]
