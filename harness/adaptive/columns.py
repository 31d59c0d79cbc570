"""The columns a γ policy and a draft selection fill in a summary's ``params``: flat keys beside the method's
parameters, every one present in every speculative cell's summary (at its default when not chosen), so summaries of
every release share their columns and a method's label (:func:`harness.analysis.tables.method_label`) names its
policy and selection. The column names are release 0.2's ``method`` keys (``q_lr``, ``selection_fit_prompts``, ...):
the summary format, kept; the config groups name the same values ``gamma_policy.lr``, ``draft_selection.fit_prompts``.
Torch-free."""
from __future__ import annotations

from typing import Any, Mapping

#: summary column -> (the γ policy's Params field, the column's value when no policy sets it)
POLICY_COLUMNS: dict[str, tuple[str, Any]] = {
    "gamma_min": ("gamma_min", 1), "gamma_max": ("gamma_max", 8), "acc_history": ("acc_history", 6),
    "acc_max": ("acc_max", 0.95), "acc_estimator": ("acc_estimator", "eq2"), "time_window": ("time_window", 32),
    "q_state_len": ("state_len", 1), "q_lr": ("lr", 0.05), "q_discount": ("discount", 0.2),
    "q_epsilon": ("epsilon", 0.05), "q_epsilon_warmup": ("epsilon_warmup", 0.3),
    "q_warmup_trials": ("warmup_trials", 25), "q_reward": ("reward", "acceptance"),
    "hf_transient": ("transient", False)}
#: summary column -> (the draft selection's Params field, the column's value when no selection sets it)
SELECTION_COLUMNS: dict[str, tuple[str, Any]] = {"selection_fit_prompts": ("fit_prompts", 25),
                                                 "selection_features": ("features", 8)}


def _columns(table: Mapping[str, tuple[str, Any]], values: Mapping[str, Any] | None) -> dict[str, Any]:
    column = {field: col for col, (field, _) in table.items()}
    out = {col: default for col, (_, default) in table.items()}
    out.update({column[k]: v for k, v in (values or {}).items() if k in column})
    return out


def selection_columns(selection: Mapping[str, Any] | None) -> dict[str, Any]:
    """A draft selection's columns (``{"name": ..., **values}``, or None: no selection)."""
    return {"draft_selection": (selection or {}).get("name", "none"), **_columns(SELECTION_COLUMNS, selection)}


def policy_columns(policy: Mapping[str, Any] | None) -> dict[str, Any]:
    """A γ policy's columns (``{"name": ..., **values}``, or None: the fixed γ) and the draft selection's at their
    defaults (a speculative method's summary without a selection)."""
    return {"gamma_policy": (policy or {}).get("name", "fixed"), **_columns(POLICY_COLUMNS, policy),
            **selection_columns(None)}
