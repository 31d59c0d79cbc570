"""The per-prompt record and the cell summary: the one place their fields are assembled.

In memory a record is a :class:`Record` and a summary a :class:`CellSummary`, each in sections (stats,
quality, energy, selection, ...); :meth:`Record.flat` / :meth:`CellSummary.flat` give the flat objects of
``records.jsonl`` and ``summary.json`` (and so of the parquet tables), the only place sections become dotted
names (``metric.<name>``, ``energy.<field>``, ``selection.<field>``, ``stat.<extra>``). Field meanings are
in :mod:`harness.stats` and the README's metrics table; fields renamed since release 0.2 are mapped by the file
readers (:mod:`harness.config.legacy`).
The summary's statistics are totals over the records and the ratios of :func:`harness.stats.ratios` applied
to those totals (pooled), plus per-prompt means where named so (``mean_prompt_tokens_per_s``,
``output_ppl``, ``metric.*``, ``stat.*``).
"""
from __future__ import annotations

import math
from dataclasses import dataclass, field
from typing import Any, Callable, Mapping, Sequence

from harness.stats import COUNT_FIELDS, pooled_totals, ratios


def _prefixed(prefix: str, fields: Mapping[str, Any]) -> dict[str, Any]:
    return {f"{prefix}{k}": v for k, v in fields.items()}


@dataclass
class Record:
    """One prompt's record: identity, the generation's statistics (``stat.*`` extras included), the draft
    selection, quality, energy and the texts. ``prompt_tokens_original`` is the prompt's length before it was
    cut to the model's context (:mod:`harness.run.context`; then ``prompt_truncated``)."""

    cell_id: str
    index: int
    example_id: str
    prompt_tokens: int
    prompt_tokens_original: int
    meta: dict = field(default_factory=dict)
    stats: dict = field(default_factory=dict)  # GenerationStats.as_record() and how the generation stopped
    selection: dict = field(default_factory=dict)  # draft selection (adaptive §5): phase, chosen draft, ...
    quality: dict = field(default_factory=dict)  # output_ppl and the task's metrics
    energy: dict = field(default_factory=dict)  # ``energy.*`` fields of the energy reading and its breakdown
    host: dict = field(default_factory=dict)  # ``host.*``: the host's load over the prompt (harness.run.contention)
    peak_gpu_mem_bytes: float = math.nan
    output_text: str = ""
    prompt: str = ""

    @property
    def prompt_truncated(self) -> bool:
        return self.prompt_tokens_original != self.prompt_tokens

    def flat(self) -> dict[str, Any]:
        """The ``records.jsonl`` object."""
        quality = dict(self.quality)
        return {"cell_id": self.cell_id, "index": self.index, "example_id": self.example_id,
                "prompt_tokens": self.prompt_tokens, "prompt_truncated": self.prompt_truncated,
                "prompt_tokens_original": self.prompt_tokens_original, **_prefixed("meta.", self.meta),
                **self.stats, **_prefixed("selection.", self.selection),
                "output_ppl": quality.pop("output_ppl", math.nan), **_prefixed("metric.", quality),
                **self.energy, **_prefixed("host.", self.host),
                "peak_gpu_mem_bytes": self.peak_gpu_mem_bytes,
                "output_text": self.output_text, "prompt": self.prompt}


def build_record(*, cell_id: str, index: int, example, prompt_ids: list[int], generation, output_text: str,
                 prompt_text: str, output_ppl: float, metrics: Mapping[str, Any], energy: Mapping[str, Any],
                 peak_gpu_mem_bytes: float = math.nan, prompt_tokens_original: int | None = None,
                 host: Mapping[str, Any] | None = None) -> Record:
    """One prompt's :class:`Record` from its generation, scores, energy reading (``energy.*`` fields) and the
    host's contention over it (``host.*``, :mod:`harness.run.contention`)."""
    stats = {**generation.stats.as_record(), "stopped_by_eos": generation.stopped_by_eos,
             "stopped_by_stop": getattr(generation, "stopped_by_stop", False)}
    return Record(cell_id=cell_id, index=index, example_id=example.id, prompt_tokens=len(prompt_ids),
                  prompt_tokens_original=len(prompt_ids) if prompt_tokens_original is None else prompt_tokens_original,
                  meta=dict(example.meta), stats=stats, selection=dict(getattr(generation, "selection", None) or {}),
                  quality={"output_ppl": output_ppl, **metrics}, energy=dict(energy), host=dict(host or {}),
                  peak_gpu_mem_bytes=peak_gpu_mem_bytes, output_text=output_text, prompt=prompt_text)


#: Range checks applied whenever a record is read back (:func:`record_problems`): counts are integers >= 0,
#: amounts are >= 0 and rates lie in [0, 1] (null/NaN = not measured, always allowed).
RECORD_COUNTS = ("index", "prompt_tokens", "prompt_tokens_original", "new_tokens", "target_calls", "draft_calls",
                 "rounds", "draft_positions", "draft_nodes", "accepted_tokens", "rejected_rounds",
                 "energy.tokens_all_runs", "energy.samples")
RECORD_AMOUNTS = ("wall_time_s", "draft_time_s", "verify_time_s", "prefill_time_s", "tokens_per_s",
                  "block_efficiency", "peak_gpu_mem_bytes", "energy.energy_per_run_j", "energy.energy_all_runs_j",
                  "energy.duration_s")
RECORD_RATES = ("acceptance_rate", "node_acceptance_rate", "energy.coverage")


def _number(v) -> bool:
    return isinstance(v, (int, float)) and not isinstance(v, bool)


def _unmeasured(v) -> bool:
    return v is None or (isinstance(v, float) and math.isnan(v))


def record_problems(rec: Mapping[str, Any], max_new_tokens: int | None = None) -> list[str]:
    """What is out of range in one record (empty when nothing is): counts that are not integers >= 0, negative
    amounts, rates outside [0, 1], a perplexity below 1, more new tokens than ``max_new_tokens``, more rejected
    rounds than rounds, per-round lists whose length is not ``rounds``."""
    bad = []
    for keys, ok, valid in ((RECORD_COUNTS, lambda v: isinstance(v, int) and not isinstance(v, bool) and v >= 0,
                             "an integer >= 0"),
                            (RECORD_AMOUNTS, lambda v: _number(v) and v >= 0, "a number >= 0"),
                            (RECORD_RATES, lambda v: _number(v) and 0 <= v <= 1, "in [0, 1]"),
                            (("output_ppl",), lambda v: _number(v) and v >= 1 - 1e-9, "a perplexity >= 1")):
        bad += [f"{k}={rec[k]!r} (valid: {valid})" for k in keys if k in rec and not _unmeasured(rec[k])
                and not ok(rec[k])]
    if bad:
        return bad
    if max_new_tokens is not None and rec.get("new_tokens", 0) > max_new_tokens:
        bad.append(f"new_tokens={rec['new_tokens']} exceeds max_new_tokens={max_new_tokens}")
    if rec.get("rejected_rounds", 0) > rec.get("rounds", math.inf):
        bad.append(f"rejected_rounds={rec['rejected_rounds']} exceeds rounds={rec['rounds']}")
    for key in ("accept_lengths", "round_gammas"):
        values = rec.get(key)
        if values is not None and (not isinstance(values, list) or not all(_number(x) and x >= 0 for x in values)
                                   or ("rounds" in rec and len(values) != rec["rounds"])):
            bad.append(f"{key} must list one count >= 0 per round ({rec.get('rounds')} rounds)")
    return bad


BREAKDOWN_ENERGY = ("prefill_j", "decode_j", "draft_j", "verify_j", "rest_j")


def energy_breakdown(attribute: Callable | None, stats, enabled: bool, prefix: str = "energy.") -> dict[str, Any]:
    """Where one generation's energy went (issue 13 item 6), as ``energy.*`` record fields.

    ``attribute(a, b, labels)`` is the energy meter's sub-window attribution
    (:meth:`harness.energy.meter.EnergyMeter.attribute`, :mod:`harness.energy.attribution`) and
    ``stats.spans`` the generation's spans (:meth:`harness.stats.GenerationStats.set_spans`):
    ``prefill_j`` (the calls that encode the prompt) and ``decode_j`` (the rest of the generation);
    for methods with a draft, ``draft_j`` (draft-model forward calls), ``verify_j`` (target forward
    calls) and ``rest_j`` (everything else). NaN with ``breakdown_reason`` when ``runner.breakdown`` is
    off (host timestamps of asynchronous device work would misplace the energy), when the meter has no
    energy counter, or when the counter cannot tell the parts apart.
    """
    out: dict[str, Any] = {f"{prefix}{k}": math.nan for k in BREAKDOWN_ENERGY}
    spans = getattr(stats, "spans", None) or {}
    if not enabled:
        return {**out, f"{prefix}breakdown_reason": "runner.breakdown=false"}
    if attribute is None or not spans.get("generation") or not spans.get("target"):
        return {**out, f"{prefix}breakdown_reason": "no forward-call spans (models not called through CountedModel)"}
    (a, b), = spans["generation"]
    reasons = []
    split = attribute(a, b, {"prefill": spans["prefill"]})
    out[f"{prefix}prefill_j"], out[f"{prefix}decode_j"] = split.energy_j["prefill"], split.energy_j["other"]
    reasons.append(split.reason)
    if spans.get("draft"):
        split = attribute(a, b, {"draft": spans["draft"], "verify": spans["target"]})
        for k in ("draft", "verify"):
            out[f"{prefix}{k}_j"] = split.energy_j[k]
        out[f"{prefix}rest_j"] = split.energy_j["other"]
        reasons.append(split.reason)
    out[f"{prefix}breakdown_reason"] = "; ".join(r for r in reasons if r) or None
    return out


def _breakdown_reason(records, summary) -> str | None:
    """Why the cell's energy breakdown fields that are null are null (None where none is)."""
    missing = [k for k in BREAKDOWN_ENERGY if not math.isfinite(summary[f"energy.{k}"])]
    if not missing:
        return None
    reasons = sorted({str(r.get("energy.breakdown_reason")) for r in records if r.get("energy.breakdown_reason")})
    only_draft = set(missing) <= {"draft_j", "verify_j", "rest_j"}
    why = "; ".join(reasons) if reasons else ("not applicable: no draft-model calls (a method without a draft)"
                                              if only_draft else "no prompt recorded a breakdown")
    return f"{', '.join(missing)} null: {why}"


def _nanmean(values) -> float:
    vals = [v for v in values if isinstance(v, (int, float)) and v is not None and math.isfinite(v)]
    return sum(vals) / len(vals) if vals else math.nan


def summarize_cell(records: Sequence[Mapping[str, Any]]) -> dict[str, Any]:
    """Cell-level statistics: totals, pooled ratios (ratios of totals, not means of ratios), and the
    per-prompt means of quality metrics and decoder extras (flat, as in ``summary.json``)."""
    totals = pooled_totals(records)
    out: dict[str, Any] = {"prompts": len(records)}
    out.update({k: totals[k] for k in COUNT_FIELDS})
    out.update(ratios(totals))
    out["mean_prompt_tokens_per_s"] = _nanmean(r.get("tokens_per_s") for r in records)
    out["output_ppl"] = _nanmean(r.get("output_ppl") for r in records)
    out["peak_gpu_mem_bytes"] = max((r["peak_gpu_mem_bytes"] for r in records
                                     if r.get("peak_gpu_mem_bytes") is not None), default=math.nan)
    for k in BREAKDOWN_ENERGY:  # totals over prompts; NaN unless every prompt has one
        values = [r.get(f"energy.{k}", math.nan) for r in records]
        values = [math.nan if v is None else v for v in values]
        out[f"energy.{k}"] = sum(values) if values and all(math.isfinite(v) for v in values) else math.nan
    out["energy.breakdown_reason"] = _breakdown_reason(records, out)
    for k in sorted({k for r in records for k in r if k.startswith("metric.") or k.startswith("stat.")}):
        out[k] = _nanmean(r.get(k) for r in records)
    return out


@dataclass
class CellSummary:
    """A finished cell's ``summary.json`` in sections: the statistics over its records (pooled counts, ratios,
    per-prompt means), the energy totals, what ran (method, parameters, config, provenance), how it ran
    (segments, interleaving) and the integrity of its records (count and SHA-256 of ``records.jsonl``)."""

    stats: dict  # summarize_cell(records)
    energy: dict  # the energy totals (``energy.*``), under the records' scoped names
    identity: dict  # cell_id, status, method, decoding, params, facts, config, max_new_tokens, ...
    run: dict  # started/finished, env, peak memory, energy meter, gpu state, segments, interleaving
    integrity: dict  # records_count, records_sha256

    @classmethod
    def of(cls, records: Sequence[Mapping[str, Any]], summarize_energy: Callable[[list[dict]], dict], *,
           identity: dict, run: dict, integrity: dict) -> "CellSummary":
        """The summary of ``records``; ``summarize_energy`` is the energy package's totals over records in its
        field names, the records' (:func:`harness.energy.summarize_records`)."""
        energy = summarize_energy([{k: v for k, v in r.items() if k.startswith("energy.")} for r in records])
        return cls(summarize_cell(records), energy, identity, run, integrity)

    def flat(self) -> dict[str, Any]:
        """The ``summary.json`` object."""
        return {**self.stats, **self.energy, **self.identity, **self.run, **self.integrity}
