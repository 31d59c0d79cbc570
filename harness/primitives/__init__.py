"""Shared decoding primitives, each written once; imports run one way (a test checks the graph).

Leaves: ``warping``, ``sampling``, ``forward`` (counted model calls), ``kv_cache``, ``tree`` (token trees),
``round`` (the round result), ``gamma_policy`` (the policy seam), ``acceptance`` (every acceptance rule),
``beams``, ``beam_verify``, ``stopping``. The speculative family: ``tree_attention`` (one forward over a
tree, sliced masks) and ``spec_state`` (caches, draft trees, rollback) ← ``drafting`` ← ``spec_loop`` (THE
round, its acceptances, the loop) ← ``multi_candidate`` (target-initialised trees).
"""
