"""The per-prompt record and the cell summary's statistics: the one place their fields are assembled.

A record is one flat JSON object per prompt (``records.jsonl``); field meanings are in
:mod:`harness.stats` and the README's metrics table. The cell summary's statistics are totals over
the records and the ratios of :func:`harness.stats.ratios` applied to those totals (pooled), plus
per-prompt means where named so (``mean_prompt_tokens_per_s``, ``output_ppl``, ``metric.*``, ``stat.*``).
"""
from __future__ import annotations

import math
from typing import Any, Mapping

from harness.stats import COUNT_FIELDS, pooled_totals, ratios


def build_record(*, cell_id: str, index: int, example, prompt_ids: list[int], generation, output_text: str,
                 prompt_text: str, output_ppl: float, metrics: Mapping[str, Any], energy: Mapping[str, Any],
                 peak_gpu_mem_bytes: float = math.nan, prompt_tokens_original: int | None = None) -> dict[str, Any]:
    """One prompt's record: identity, the generation's statistics (``stat.*`` extras included), quality,
    energy (``energy.*``), and the texts. ``prompt_tokens_original``: the prompt's length before it was
    cut to the model's context (:mod:`harness.context`); then ``prompt_truncated`` is true and
    ``prompt_tokens`` is the length decoded from."""
    return {"cell_id": cell_id, "index": index, "example_id": example.id, "prompt_tokens": len(prompt_ids),
            "prompt_truncated": prompt_tokens_original is not None,
            "prompt_tokens_original": len(prompt_ids) if prompt_tokens_original is None else prompt_tokens_original,
            **{f"meta.{k}": v for k, v in example.meta.items()},
            **generation.stats.as_record(), "stopped_by_eos": generation.stopped_by_eos,
            "output_ppl": output_ppl,
            **{f"metric.{k}": v for k, v in metrics.items()},
            **energy,
            "peak_gpu_mem_bytes": peak_gpu_mem_bytes,
            "output_text": output_text, "prompt": prompt_text}


def _nanmean(values) -> float:
    vals = [v for v in values if isinstance(v, (int, float)) and v is not None and math.isfinite(v)]
    return sum(vals) / len(vals) if vals else math.nan


def summarize_cell(records: list[Mapping[str, Any]]) -> dict[str, Any]:
    """Cell-level statistics: totals, pooled ratios (ratios of totals, not means of ratios), and the
    per-prompt means of quality metrics and decoder extras."""
    totals = pooled_totals(records)
    out: dict[str, Any] = {"prompts": len(records)}
    out.update({k: totals[k] for k in COUNT_FIELDS})
    out.update(ratios(totals))
    out["mean_prompt_tokens_per_s"] = _nanmean(r.get("tokens_per_s") for r in records)
    out["output_ppl"] = _nanmean(r.get("output_ppl") for r in records)
    out["peak_gpu_mem_bytes"] = max((r["peak_gpu_mem_bytes"] for r in records
                                     if r.get("peak_gpu_mem_bytes") is not None), default=math.nan)
    for k in sorted({k for r in records for k in r if k.startswith("metric.") or k.startswith("stat.")}):
        out[k] = _nanmean(r.get(k) for r in records)
    return out
