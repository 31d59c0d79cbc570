"""Prompts that do not fit the model's trained context: one documented rule, applied before decoding.

A model is trained on ``n_positions`` positions (``max_position_embeddings``, or ``n_positions`` /
``n_ctx`` for GPT-2-style configs; the pair's context is the smaller of target and draft). A cell
decodes up to ``max_new_tokens`` new tokens, and a speculative method looks ``lookahead`` positions
beyond its accepted output (its draft length γ, or the depth of its token tree, plus the bonus token:
the method's ``Params.lookahead``, or its γ policy's γ_max + 1, :attr:`harness.methods.MethodSpec.lookahead`).
The rule:

* a prompt of more than ``budget = n_positions − max_new_tokens − lookahead`` tokens keeps its **last**
  ``budget`` tokens (the end of a prompt is what the model continues); its record says
  ``prompt_truncated: true`` and ``prompt_tokens_original`` (the length before), so nothing is silent;
* a cell whose ``max_new_tokens + lookahead`` leaves no room for a prompt (``budget < 1``) is a config
  error, found before any weights load (:mod:`harness.config.validation`);
* output perplexity is computed on at most ``n_positions`` tokens (:func:`perplexity_window`), never
  past the trained context.
"""
from __future__ import annotations

from typing import Any, Mapping, Sequence

from harness.errors import ConfigError

POSITION_KEYS = ("max_position_embeddings", "n_positions", "n_ctx", "seq_length")


def resolve_max_new_tokens(cfg: Mapping[str, Any], dataset_default: int) -> int:
    """A cell's ``max_new_tokens``: the top-level value, or the dataset's when it is null (``conf/config.yaml``).
    0 and negative values are config errors (:mod:`harness.config.validation`), never "the default"."""
    value = cfg.get("max_new_tokens")
    value = dataset_default if value is None else value
    if isinstance(value, bool) or not isinstance(value, int) or value < 1:
        raise ConfigError(f"max_new_tokens must be an integer >= 1 (or null = the dataset's), got {value!r}")
    return value


def configured_max_new_tokens(cfg: Mapping[str, Any]) -> int | None:
    """The cell's ``max_new_tokens`` as far as its config says it (the top-level value, else the dataset's);
    None when neither is set (the task's own default applies)."""
    value = cfg.get("max_new_tokens")
    value = (cfg.get("dataset") or {}).get("max_new_tokens") if value is None else value
    return value if isinstance(value, int) and not isinstance(value, bool) else None


def config_positions(config: Any) -> int | None:
    """The trained context of a HF model config (None when it declares none)."""
    for key in POSITION_KEYS:
        value = getattr(config, key, None)
        if isinstance(value, int) and value > 0:
            return value
    return None


def pair_positions(target_config: Any, draft_configs: Sequence[Any] = ()) -> int | None:
    """The smallest trained context among the pair's models (None when none declares one)."""
    found = [p for p in (config_positions(c) for c in [target_config, *draft_configs]) if p]
    return min(found) if found else None


def prompt_budget(n_positions: int, max_new_tokens: int, extra: int) -> int:
    """How many prompt tokens fit: ``n_positions − max_new_tokens − extra``."""
    return n_positions - max_new_tokens - extra


def fit_prompt(ids: list[int], n_positions: int | None, max_new_tokens: int,
               extra: int) -> tuple[list[int], int | None]:
    """``(ids, None)`` when the prompt fits, else ``(its last budget tokens, the original length)``."""
    if n_positions is None:
        return list(ids), None
    budget = prompt_budget(n_positions, max_new_tokens, extra)
    if budget < 1:
        raise ConfigError(f"max_new_tokens ({max_new_tokens}) + lookahead ({extra}) leaves no room for a prompt "
                         f"in the model's {n_positions} positions")
    if len(ids) <= budget:
        return list(ids), None
    return list(ids)[-budget:], len(ids)


def perplexity_window(prompt_ids: list[int], output_ids: list[int], n_positions: int | None) -> list[int]:
    """The prompt tokens to condition output perplexity on so that prompt + output ≤ ``n_positions``: the
    last ones (at least one); the full prompt when it fits or the context is unknown."""
    if n_positions is None or len(prompt_ids) + len(output_ids) <= n_positions:
        return list(prompt_ids)
    keep = max(1, n_positions - len(output_ids))
    return list(prompt_ids)[-keep:]
