"""Shared decoding primitives, each written once; imports run one way (a test checks the graph).

Leaves: ``warping``, ``sampling``, ``forward`` (counted model calls), ``kv_cache``, ``tree``,
``gamma_policy``, ``acceptance`` (pure rules), ``beams``, ``beam_verify``. The speculative family:
``spec_state`` (caches, draft trees, step results, rollback) ← ``drafting`` ← ``spec_loop``
(round drivers and the loop), which also uses ``acceptance`` and ``gamma_policy``.
"""
