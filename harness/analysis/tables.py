"""A cell's row and its records in the record contract's names (HELPERS.md), whatever their age.

Summaries written before the contract carry ``decoder_params`` (parameters mixed with facts such
as a library version) instead of ``params``; records carry ``iterations`` and ``drafted_tokens``
instead of ``rounds``, ``draft_positions`` and ``draft_nodes``, and no ``round_gammas``. This
module maps both to one set of columns so every analysis reads one vocabulary.
"""
from __future__ import annotations

import json
import math
from typing import Any

import pandas as pd

from harness.analysis.regime import comparison_items, comparison_key, regime_label, warp_of
from harness.config.legacy import current_names

GREEDY, SAMPLING = "greedy", "sampling"
CELL_KEYS = ("pair", "dataset", "gpu", "seed")  # with the method: what identifies a cell
NAN = math.nan


# ---- parameters, decoding mode and labels -------------------------------------------------------

def cell_params(summary: dict) -> dict:
    """The decoder's parameters (not facts) from a summary.

    New summaries have ``params``. Old ones have ``decoder_params``, which also holds facts a
    decoder added to ``describe()`` (e.g. ``hf_assisted``'s ``transformers_version`` and
    ``hf_default_schedule``): there, dict-valued entries and keys ending in ``_version`` are facts.
    """
    if isinstance(summary.get("params"), dict):
        raw, old = summary["params"], False
    else:
        raw, old = summary.get("decoder_params") or {}, True
    params = {}
    for k, v in raw.items():
        if k in ("method", "name"):
            continue
        if old and (isinstance(v, dict) or k.endswith("_version")):
            continue
        params[k] = v
    return params


def param_value(v: Any) -> Any:
    """A parameter as a table cell: lists/tuples become their JSON text (e.g. MCSD's k_config)."""
    if isinstance(v, (list, tuple)):
        return json.dumps(list(v))
    if isinstance(v, dict):
        return json.dumps(v, sort_keys=True)
    return v


def infer_decoding(method_name: str, params: dict, declared: str | None = None) -> str:
    """"greedy" or "sampling": the summary's ``decoding`` field when present; else temperature 0
    is greedy, ``sample: false`` (MTJD) is greedy, and a method without a temperature parameter
    (ar_greedy, beam_search) is deterministic, hence greedy."""
    if declared in (GREEDY, SAMPLING):
        return declared
    if params.get("sample") is False:
        return GREEDY
    if "temperature" in params:
        t = params["temperature"]
        return GREEDY if t is not None and float(t) == 0.0 else SAMPLING
    return GREEDY


def method_label(method_name: str, params: dict) -> str:
    """``name(k=v, ...)`` over every parameter, defaults included: identifies the method exactly."""
    if not params:
        return method_name
    return method_name + "(" + ", ".join(f"{k}={_fmt(v)}" for k, v in params.items()) + ")"


def _fmt(v: Any) -> str:
    if isinstance(v, (list, tuple)):
        return "(" + ",".join(str(x) for x in v) + ")"
    return str(v)


def _flat(prefix: str, d: dict) -> dict:
    out = {}
    for k, v in d.items():
        key = f"{prefix}{k}"
        if isinstance(v, dict):
            out.update(_flat(key + ".", v))
        elif isinstance(v, (list, tuple)):
            out[key] = json.dumps(list(v), default=str)
        else:
            out[key] = v
    return out


def cell_row(summary: dict) -> dict:
    """One row of the cells table from a ``summary.json``: its scalar fields, ``env.*``,
    ``energy_meter.*``, ``param.*``, and the identity columns (method label, pair, dataset, gpu,
    seed, decoding, interleaved)."""
    summary = current_names(summary)
    cfg = summary.pop("config", None) or {}
    method_name = summary.get("method_name") or (cfg.get("method") or {}).get("name")
    if not method_name:
        raise ValueError("summary has no method_name (and no config.method.name)")
    params = cell_params(summary)
    for group in ("gamma_policy", "draft_selection"):  # their own config groups (INTERFACES.md 5): as parameters
        node = cfg.get(group)
        if isinstance(node, dict) and node.get("name") is not None:
            params.setdefault(group, node["name"])
            params.update({k: v for k, v in node.items() if k != "name" and k not in params})
    row = {k: v for k, v in summary.items() if not isinstance(v, (dict, list))}
    row.update(_flat("env.", summary.get("env") or {}))
    row.update(_flat("energy_meter.", summary.get("energy_meter") or {}))
    row.update({f"param.{k}": param_value(v) for k, v in params.items()})

    def ident(key):
        if summary.get(key) is not None and not isinstance(summary.get(key), dict):
            return summary[key]
        v = cfg.get(key)
        return v.get("name") if isinstance(v, dict) else v

    row.update({"method_name": method_name, "family": method_name, "method": method_label(method_name, params),
                "pair": _pair_label(ident("pair"), cfg), "dataset": ident("dataset"), "gpu": ident("gpu"),
                "seed": ident("seed"),
                "decoding": infer_decoding(method_name, params, summary.get("decoding")),
                "interleaved": bool(summary.get("interleaved", False)),
                "max_new_tokens": summary.get("max_new_tokens", cfg.get("max_new_tokens")),
                "params_json": json.dumps(params, sort_keys=True, default=str)})
    row.update(_contract_columns(summary, cfg, params, row))
    return row


def _pair_label(name, cfg: dict):
    """The pair's name, with `` [graphs]`` for a cell run in the graphs execution mode (``pair.execution``): the
    two modes' cells are separate comparisons, each with its own AR baseline, side by side in the report."""
    pair = node if isinstance(node := cfg.get("pair"), dict) else {}
    mode = pair.get("execution") or "eager"
    return name if mode == "eager" or name is None else f"{name} [{mode}]"


def _contract_columns(summary: dict, cfg: dict, params: dict, row: dict) -> dict:
    """What the report compares by: the regime and comparison key (:mod:`~harness.analysis.regime`), whether
    the method is lossless (None = not recorded), the task's declared primary metric, and the config's
    ``report`` node (baselines, iso pairs, tables)."""
    lossless = summary.get("lossless")
    out = {"lossless": lossless if isinstance(lossless, bool) else None,
           "primary_metric": summary.get("primary_metric"),
           "primary_metric_higher_is_better": summary.get("primary_metric_higher_is_better"),
           "primary_metric_recorded": "primary_metric" in summary,
           "regime": regime_label(row["decoding"], warp_of(params, cfg)),
           "energy_source_config": (cfg.get("energy") or {}).get("source") if isinstance(cfg.get("energy"), dict)
           else None,
           "execution": ((cfg.get("pair") or {}).get("execution") if isinstance(cfg.get("pair"), dict) else None)
           or "eager",
           "pair_target": (cfg.get("pair") or {}).get("target") if isinstance(cfg.get("pair"), dict) else None,
           "pair_draft": (cfg.get("pair") or {}).get("draft") if isinstance(cfg.get("pair"), dict) else None,
           "pair_drafts": json.dumps((cfg.get("pair") or {}).get("drafts")) if isinstance(cfg.get("pair"), dict)
           else "null"}
    report = cfg.get("report") if isinstance(cfg.get("report"), dict) else {}
    out["report_json"] = json.dumps(report, sort_keys=True, default=str)
    out["match_json"] = comparison_key(comparison_items(summary, cfg, {**row, **out}))
    return out


# ---- records ------------------------------------------------------------------------------------

def draft_depth(params: dict) -> int | None:
    """The fixed draft depth γ a decoder was configured with (``gamma``; MCSD: len(k_config))."""
    if params.get("gamma") is not None:
        return int(params["gamma"])
    if isinstance(params.get("k_config"), (list, tuple)):
        return len(params["k_config"])
    return None


def infer_round_gammas(accept_lengths: list[int], gamma: int, max_new_tokens: int | None,
                       min_depth: int = 0) -> list[int]:
    """Per-round draft depths for records written before ``round_gammas`` existed.

    The loop drivers clip each round's depth to the tokens still needed minus one,
    ``max(min_depth, min(γ, remaining − 1))`` (the chain/tree loop keeps at least 1, DSBD 0);
    a round never drafted fewer than it accepted.
    """
    out, done = [], 0
    for length in accept_lengths:
        depth = gamma if max_new_tokens is None else \
            max(min_depth, min(gamma, int(max_new_tokens) - done - 1))
        out.append(max(depth, int(length) - 1))
        done += int(length)
    return out


def normalize_record(rec: dict, cell: dict, params: dict | None = None) -> dict:
    """A record in the contract's names, with the cell's identity columns added.

    Old records: ``iterations`` → ``rounds``; ``drafted_tokens`` → ``draft_nodes`` (what the decoder
    counted: chain length for SD, all tree nodes for tree methods, layers for DSBD); ``round_gammas``
    reconstructed from the configured γ and the clipping rule (:func:`infer_round_gammas`) and kept
    only if it reproduces what the record does know (``stat.rejected_rounds`` or, for chains, the
    drafted count) and the draft proposed at least Σ γ_r tokens (BiLD, which stops drafting early,
    fails this: its depths stay unknown); ``draft_positions`` = Σ round_gammas; ``rejected_rounds`` from ``stat.``.
    """
    r = current_names(rec)  # iterations → rounds, drafted_tokens → draft_nodes, ... (the one table)
    params = params if params is not None else {}
    if "rejected_rounds" not in r and "stat.rejected_rounds" in r:
        r["rejected_rounds"] = r["stat.rejected_rounds"]
    lengths = [int(x) for x in (r.get("accept_lengths") or [])]
    r["accept_lengths"] = lengths
    gammas = r.get("round_gammas")
    r["round_gammas_source"] = "recorded" if gammas is not None else None
    if gammas is None and lengths and (r.get("rounds") or 0) > 0:
        gamma = draft_depth(params)
        if gamma is not None:
            for min_depth in (1, 0):
                guess = infer_round_gammas(lengths, gamma, cell.get("max_new_tokens"), min_depth)
                rejected = sum(a - 1 < g for a, g in zip(lengths, guess))
                known_rejected, nodes = r.get("rejected_rounds"), _num(r.get("draft_nodes"))
                if nodes < sum(guess):  # a round proposes at least its depth: the method drafted less (BiLD)
                    continue
                if (known_rejected is not None and _num(known_rejected) == rejected) or nodes == sum(guess):
                    gammas = guess
                    r["round_gammas_source"] = "inferred"
                    break
    r["round_gammas"] = [int(g) for g in gammas] if gammas is not None else None
    if r.get("draft_positions") is None:
        r["draft_positions"] = sum(r["round_gammas"]) if r["round_gammas"] is not None else NAN
    if r.get("rejected_rounds") is None and r["round_gammas"] is not None:
        r["rejected_rounds"] = sum(a - 1 < g for a, g in zip(lengths, r["round_gammas"]))
    for key in ("draft_time_s", "verify_time_s"):
        r.setdefault(key, NAN)
    for key in ("cell_id", "method", "method_name", "family", "pair", "dataset", "gpu", "seed", "decoding",
                "max_new_tokens"):
        if key in cell:
            r[key] = cell[key]
    return r


def _num(v) -> float:
    try:
        return float(v)
    except (TypeError, ValueError):
        return NAN


def numeric(df: pd.DataFrame) -> pd.DataFrame:
    """JSON stores NaN as null: columns holding only numbers and nulls become float columns (NaN)."""
    for col in df.columns:
        values = df[col]
        if values.dtype == object and values.map(
                lambda v: v is None or (isinstance(v, (int, float)) and not isinstance(v, bool))).all():
            df[col] = pd.to_numeric(values, errors="coerce")
    return df


def prompt_key(records: pd.DataFrame) -> pd.Series:
    """What pairs a prompt across cells: its example id when recorded, else its index."""
    if "example_id" in records.columns:
        ids = records["example_id"]
        return ids.where(ids.notna(), records.get("index")).astype(str)
    return records["index"].astype(str)


def categories(records: pd.DataFrame) -> pd.Series:
    """``meta.category`` where the dataset has one, else the empty string."""
    if "meta.category" in records.columns:
        return records["meta.category"].fillna("").astype(str)
    return pd.Series("", index=records.index)
