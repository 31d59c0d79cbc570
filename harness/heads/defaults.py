"""The heads' defaults and checks that the config needs, torch-free (``harness --help`` lists the keys they
default without importing torch): EAGLE-2's dynamic tree (:mod:`harness.heads.eagle`) and SpecDec++'s stop rule
(:mod:`harness.heads.specdecpp`)."""
from __future__ import annotations

from harness.errors import ConfigError

# EAGLE-2's tree: total_token 60 − 1 (the stem excluded), depth 5 + 1, top_k 10
DEFAULT_TOP_K = 10
DEFAULT_DEPTH = 6
DEFAULT_TOTAL_TOKENS = 59

# SpecDec++'s stop rule: the reference README's benchmark command, --stop_threshold 0.3 --bound 2 20 (a 3-layer head)
DEFAULT_THRESHOLD = 0.3
DEFAULT_MIN_GAMMA = 2
DEFAULT_MAX_GAMMA = 20


def check_tree_params(top_k: int, depth: int, total_tokens: int) -> None:
    """Refuse tree sizes the expansion cannot produce (each named with its valid range)."""
    if top_k < 1:
        raise ConfigError(f"top_k must be >= 1, got {top_k}")
    if depth < 1:
        raise ConfigError(f"depth must be >= 1, got {depth}")
    most = top_k + (depth - 1) * top_k * top_k
    if not 1 <= total_tokens <= most:
        raise ConfigError(f"total_tokens must be in [1, {most}] (top_k + (depth − 1)·top_k² nodes are generated), "
                          f"got {total_tokens}")
