"""Names and layouts of release 0.2, in ONE table: every deprecated name with the message that maps it, and the
0.2 config layout that the ids of cells measured under identity version 1 and the summaries' columns keep.

Deprecated names keep working for one release, each with a ``DeprecationWarning`` and a logged line naming
its replacement; the project's own code, configs and tests use none of them:

* method parameters renamed in 0.2 (:data:`RENAMED_PARAMS`, e.g. ``specinfer.num_sequences`` →
  ``num_drafts``) and ``mtjd.sample`` (→ the decoding);
* ``method.temperature/top_k/top_p`` → ``decoding.temperature/top_k/top_p``;
* the γ policy and draft selection, which were ``method`` keys and are their own config groups now
  (:data:`MOVED_KEYS`: ``method.gamma_policy=online method.acc_history=6`` → ``gamma_policy=online
  gamma_policy.acc_history=6``; ``method.q_lr`` → ``gamma_policy.lr``; ``method.draft_selection=ols
  method.selection_fit_prompts=25`` → ``draft_selection=ols draft_selection.fit_prompts=25``);
* the decoding preset ``sampling_seed000`` → ``sampling_dsbd`` (:data:`RENAMED_PRESETS`).

On the command line the old keys are rewritten before Hydra composes (:func:`upgrade_overrides`); in the
Python API :func:`upgrade_method_params` maps them. The id of a cell measured under identity version 1 (releases
0.2/0.3: :mod:`harness.config.identity`) hashes the 0.2 layout (:func:`layout_0_2`), so such a cell keeps its id and
stays reusable; new cells (version 2) are hashed as composed, without this module. Summaries' ``params`` keep the 0.2
flat columns as their format (:mod:`harness.adaptive.columns`, where the decoders take them), so analyses of old and
new results read the same columns.

Renamed **record and summary fields** (:data:`RENAMED`) are mapped by every reader of result files
(:func:`current_names`, applied by :func:`harness.results.store.read_records` and the analysis loader), so results
written before a rename still load; the writers (the energy reading, the record) use the current names at the
source. Where two fields once shared a
vocabulary but not a scope: ``new_tokens`` counts the tokens of one generation, while an energy reading may run
the workload several times (``energy.repetitions``); the energy fields say which they mean —
``energy.energy_per_run_j`` / ``energy.net_energy_per_run_j`` (one run), ``energy.energy_all_runs_j`` and
``energy.tokens_all_runs`` (every measured run; J/token is their ratio). Torch-free.
"""
from __future__ import annotations

import copy
import dataclasses
import logging
import warnings
from typing import Any, Mapping

from harness.adaptive.columns import POLICY_COLUMNS, SELECTION_COLUMNS, policy_columns, selection_columns

log = logging.getLogger("harness")

WARP_KEYS = ("temperature", "top_k", "top_p")

#: method -> {0.2-deprecated parameter name: its name now}
RENAMED_PARAMS: dict[str, dict[str, str]] = {
    "mtjd": {"k": "gamma", "num_beams": "width"},
    "mtad": {"num_beams": "draft_width"},
    "specinfer": {"num_sequences": "num_drafts"},
    "spectr": {"num_sequences": "num_drafts"},
}
#: deprecated decoding presets -> their names now
RENAMED_PRESETS: dict[str, str] = {"sampling_seed000": "sampling_dsbd"}

#: 0.2 ``method`` keys of the γ policy (-> ``gamma_policy.<key>``) and of draft selection (-> ``draft_selection.<key>``)
#: with their 0.2 defaults: the summary's flat columns (:mod:`harness.adaptive.columns`) are these keys
POLICY_KEYS_0_2, SELECTION_KEYS_0_2 = POLICY_COLUMNS, SELECTION_COLUMNS
#: every 0.2 ``method`` key that moved to a group: old key -> new dotted key
MOVED_KEYS: dict[str, str] = {"gamma_policy": "gamma_policy", "draft_selection": "draft_selection",
                              **{k: f"gamma_policy.{new}" for k, (new, _) in POLICY_KEYS_0_2.items()},
                              **{k: f"draft_selection.{new}" for k, (new, _) in SELECTION_KEYS_0_2.items()}}

#: the 0.2 method layout: methods whose node carried the γ-policy and selection keys; methods without the warp slots
SPECULATIVE_0_2 = ("sd", "specinfer", "spectr", "mcsd", "mcsd_dynamic", "mcsd_target_init", "mtad", "bild", "typical")
NO_WARP_0_2 = ("ar", "ar_greedy", "beam", "beam_search")
METHODS_0_2 = ("ar", "ar_greedy", "ar_sampling", "beam", "beam_search", "beam_sampling", "dsbd", "hf_assisted",
               "mtjd", *SPECULATIVE_0_2)


def deprecation(message: str) -> None:
    """A DeprecationWarning for Python callers and a logged line for command-line users."""
    warnings.warn(message, DeprecationWarning, stacklevel=3)
    log.warning(message)


def preset_name(name: str) -> str:
    """A decoding preset's name now (a deprecated one mapped, with its message)."""
    if name in RENAMED_PRESETS:
        deprecation(f"decoding '{name}' is deprecated and will be removed in the next release; "
                    f"use decoding={RENAMED_PRESETS[name]} (the same top-k 10, top-p 0.8)")
        return RENAMED_PRESETS[name]
    return name


def old_presets(presets: Mapping[str, Any]) -> dict[str, Any]:
    """The deprecated decoding presets, each its preset now under its old name (the ``decoding`` config group keeps
    them composable; the name is mapped, with its message, where the cell's decoding is read:
    :func:`harness.methods.read_decoding`)."""
    return {old: dataclasses.replace(presets[new], name=old) for old, new in RENAMED_PRESETS.items()}


def upgrade_method_params(method: str, params: Mapping[str, Any]) -> tuple[dict, dict, dict]:
    """(method params, γ-policy values, draft-selection values) with deprecated names mapped (API callers).

    ``gamma_policy``/``draft_selection`` given as method parameters become the group's ``name``."""
    from harness.errors import ConfigError

    out: dict[str, Any] = dict(params)
    policy: dict[str, Any] = {}
    selection: dict[str, Any] = {}
    for old, new in RENAMED_PARAMS.get(method, {}).items():
        if old in out:
            value = out.pop(old)
            deprecation(f"method '{method}': parameter '{old}' is deprecated and will be removed in the next "
                        f"release; use '{new}' (method.{new}={value} on the command line)")
            if new in out and out[new] != value:
                raise ConfigError(f"method '{method}': both '{new}'={out[new]} and its deprecated name "
                                  f"'{old}'={value} are set; keep '{new}' only")
            out[new] = value
    for old, new in MOVED_KEYS.items():
        if old in out:
            value = out.pop(old)
            deprecation(f"method '{method}': parameter '{old}' is deprecated and will be removed in the next "
                        f"release; it is {new}={value} now (the {new.split('.')[0]} group)")
            group, _, key = new.partition(".")
            (policy if group == "gamma_policy" else selection)[key or "name"] = value
    if method == "mtjd" and out.get("sample") is not None:
        sample = out.pop("sample")
        deprecation(f"method '{method}': parameter 'sample' is deprecated and will be removed in the next release; "
                    "mtjd follows the decoding (decoding=greedy: beam search, decoding=sampling: beam sampling)")
        if not sample:
            out["temperature"] = 0.0
        elif out.get("temperature") == 0:
            raise ConfigError("mtjd with sample=true needs temperature > 0 (decoding=sampling)")
    return out, policy, selection


def _rewrite(override: str) -> str:
    """One command-line override with a deprecated key mapped (its message logged), else unchanged."""
    prefix = override[:len(override) - len(override.lstrip("+~"))]
    key, sep, value = override[len(prefix):].partition("=")
    if key.startswith("method."):
        name = key[len("method."):]
        renamed = {old: new for table in RENAMED_PARAMS.values() for old, new in table.items()}
        if name in MOVED_KEYS:
            new = MOVED_KEYS[name]
            deprecation(f"method.{name} is deprecated and will be removed in the next release; use {new}")
            return f"{prefix.replace('+', '')}{new}{sep}{value}"
        if name in WARP_KEYS:
            deprecation(f"method.{name} is deprecated and will be removed in the next release; use decoding.{name}")
            return f"{prefix}decoding.{name}{sep}{value}"
        if name in renamed:
            deprecation(f"method.{name} is deprecated and will be removed in the next release; use "
                        f"method.{renamed[name]}")
            return f"{prefix}method.{renamed[name]}{sep}{value}"
    if key == "decoding" and value in RENAMED_PRESETS:
        return f"{prefix}decoding={preset_name(value)}"
    return override


def upgrade_overrides(overrides: list[str]) -> list[str]:
    """Command-line overrides with deprecated keys and presets mapped to their names now (flags untouched)."""
    return [o if o.startswith("-") else _rewrite(o) for o in overrides]


def flat_policy_params(policy: Mapping[str, Any] | None, selection: Mapping[str, Any] | None) -> dict[str, Any]:
    """The 0.2 flat ``method`` keys of a γ policy and a draft selection (each ``{"name": ..., **values}`` or None):
    every key at its 0.2 default, the chosen ones' values under their 0.2 names (the summary's columns)."""
    return {**policy_columns(policy), **selection_columns(selection)}


def layout_0_2(cfg: Mapping[str, Any]) -> dict:
    """A composed cell config in the 0.2 layout identity version 1 hashes: the γ policy and draft selection
    back inside ``method`` (every key, 0.2 names), the deprecated slots 0.2's method schema carried (unset),
    and the decoding preset's 0.2 name. Methods added after 0.2 keep the layout they have."""
    out = copy.deepcopy(dict(cfg))
    policy, selection = out.pop("gamma_policy", None), out.pop("draft_selection", None)
    decoding = out.get("decoding")
    if isinstance(decoding, dict) and decoding.get("name") in RENAMED_PRESETS.values():
        old = {v: k for k, v in RENAMED_PRESETS.items()}
        out["decoding"] = {**decoding, "name": old[decoding["name"]]}
    method = dict(out["method"]) if isinstance(out.get("method"), dict) else {}
    name = method.get("name")
    flat = name in SPECULATIVE_0_2 and all(v is None or isinstance(v, Mapping) for v in (policy, selection))
    if not flat:  # no 0.2 layout for these: a chosen policy/selection (even an invalid one) is hashed as it is
        if policy is not None:
            out["gamma_policy"] = policy
        if selection is not None:
            out["draft_selection"] = selection
    if name not in METHODS_0_2:
        return out
    if name not in NO_WARP_0_2:
        method.update({k: None for k in WARP_KEYS})
    method.update({old: None for old in RENAMED_PARAMS.get(name, {})})
    if name == "mtjd":
        method["sample"] = None
    if flat:
        method.update(flat_policy_params(policy, selection))
        # keys 0.2 did not have (policies and settings added since) are hashed under their group's name
        method.update(_new_keys("gamma_policy", policy, {new for new, _ in POLICY_KEYS_0_2.values()}))
        method.update(_new_keys("draft_selection", selection, {new for new, _ in SELECTION_KEYS_0_2.values()}))
    out["method"] = method
    return out


def _new_keys(group: str, values: Mapping[str, Any] | None, known: set[str]) -> dict[str, Any]:
    return {f"{group}.{k}": v for k, v in (values or {}).items() if k != "name" and k not in known}


# ---- record and summary fields ----

#: old name -> current name (records and summaries)
RENAMED: dict[str, str] = {
    "iterations": "rounds",
    "drafted_tokens": "draft_nodes",
    "energy.energy_j": "energy.energy_per_run_j",
    "energy.net_energy_j": "energy.net_energy_per_run_j",
    "energy.total_energy_j": "energy.energy_all_runs_j",
    "energy.tokens": "energy.tokens_all_runs",
}


def current_names(fields: Mapping[str, Any]) -> dict[str, Any]:
    """The fields under their current names (a current name already present wins over its old one)."""
    out = dict(fields)
    for old, new in RENAMED.items():
        if old in out:
            value = out.pop(old)
            out.setdefault(new, value)
    return out
