"""Judging finished cells: after a cell (or an interleaved comparison) has generated every prompt, outside
every timed and energy window, its records are graded and the judgments written beside them
(``judgments.jsonl``, ``judge.json``: :mod:`harness.judge.results`). The records and the summary are never
changed, so a cell is graded again — by another judge, in another mode — by rerunning the same command
with other ``judge.*`` settings: the finished cell is skipped (``judge`` is not in its identity) and only
judged; judgments already in the cache are not asked again.

Pairwise grading compares the cell with the finished cell of the reference method (``judge.reference``)
whose config is this cell's in every other key, found among the cells of the same results folder.
"""
from __future__ import annotations

import hashlib
import json
import logging
import math
from datetime import datetime, timezone
from pathlib import Path

from harness.config import identity

from harness.results import store
from harness.judge import prompts as P
from harness.judge.cache import CACHE_DIRNAME, JudgmentCache
from harness.judge.config import JudgeConfig
from harness.judge.grade import SCORE, WIN_RATE, answer_text, build_jobs, judgment_lines, run_jobs
from harness.judge.results import JUDGE_SUMMARY, JUDGMENTS, read_judge_summary
from harness.resources import data_dir

log = logging.getLogger("harness")


def judge_cells(cells: list[tuple[dict, Path]]) -> None:
    """Grade each finished ``(config, cell folder)`` whose config names a judge. A judge problem is logged and
    never fails a cell (its judgments are NaN with the reason)."""
    for cfg, cell_dir in cells:
        try:
            judge_cell(cfg, Path(cell_dir))
        except Exception as e:  # noqa: BLE001 — the generation is done and kept whatever the judge does
            log.error("cell %s: judging failed: %s: %s", Path(cell_dir).name, type(e).__name__, e)


def _without(cfg: dict, *keys: str) -> dict:
    out = identity.identity_config(cfg, version=1)  # stored configs of any release, compared in one layout
    for k in keys:
        out.pop(k, None)
    return json.loads(json.dumps(out, sort_keys=True, default=str))


def find_reference(cfg: dict, cell_dir: Path, method: str) -> tuple[Path | None, str | None]:
    """The finished cell of ``method`` with this cell's settings in every other key: ``(folder, None)`` or
    ``(None, reason)``."""
    mine, hits = _without(cfg, "method", "judge"), []
    for path in sorted(cell_dir.parent.glob(f"*/{store.SUMMARY}")):
        if path.parent == cell_dir:
            continue
        try:
            summary = json.loads(path.read_text(encoding="utf-8"))
        except (OSError, ValueError):
            continue
        other = summary.get("config") if isinstance(summary, dict) else None
        named = (summary.get("method_name"), (other.get("method") or {}).get("name")) if isinstance(other, dict) else ()
        if not isinstance(other, dict) or method not in named:
            continue
        if _without(other, "method", "judge") == mine and store.finished_state(path.parent)[0] == "done":
            hits.append(path.parent)
    if len(hits) == 1:
        return hits[0], None
    if not hits:
        return None, (f"no finished cell of the reference method {method} with this cell's other settings in "
                      f"{cell_dir.parent} (run it, then rerun this command to judge)")
    return None, f"{len(hits)} cells of the reference method {method} match: {', '.join(h.name for h in hits)}"


def _reference_answers(task, cfg: dict, cell_dir: Path, judge: JudgeConfig, summary: dict):
    """(answers by example id or the reason there are none, the reference cell's id, its records' checksum)."""
    if judge.reference is None:  # the judge's config check asks for one in pairwise mode
        return "no reference method (judge.reference)", None, None
    if judge.reference in (summary.get("method_name"), (cfg.get("method") or {}).get("name")):
        return "this cell is the reference method's", None, None
    ref_dir, reason = find_reference(cfg, cell_dir, judge.reference)
    if ref_dir is None:
        return reason, None, None
    ref_summary = json.loads((ref_dir / store.SUMMARY).read_text(encoding="utf-8"))
    answers = {r.get("example_id"): answer_text(task, r) for r in store.read_records(ref_dir)}
    return answers, ref_dir.name, ref_summary.get("records_sha256")


def _sha256(path: Path) -> str:
    return hashlib.sha256(path.read_bytes()).hexdigest()


def _mean(values) -> float:
    vals = [v for v in values if isinstance(v, (int, float)) and math.isfinite(v)]
    return sum(vals) / len(vals) if vals else math.nan


def _counts(lines: list[dict], jobs) -> dict:
    metrics = sorted({k for line in lines for k in line if k.startswith(f"metric.{SCORE}") or
                      k.startswith(f"metric.{WIN_RATE}")})
    fresh = [j.ms for j in jobs if j.output is not None and not j.cached]
    values = [line[k] for line in lines for k in (f"metric.{SCORE}", f"metric.{WIN_RATE}") if k in line]
    return {"judgments": sum(j.prompt is not None for j in jobs), "from_cache": sum(j.cached for j in jobs),
            "asked": len(fresh), "failed": sum(not (isinstance(v, float) and math.isfinite(v)) for v in values),
            "ms_per_asked_judgment": _mean(fresh),
            **{k.removeprefix("metric."): _mean(line.get(k) for line in lines) for k in metrics}}


def judge_cell(cfg: dict, cell_dir: Path) -> dict | None:
    """Grade one finished cell with the judge its config names; returns ``judge.json`` (None: no judge, or a
    task that is not judged). Skips the work when the judgments on disk are complete and current."""
    judge = JudgeConfig.from_config(cfg.get("judge"))
    if not judge.enabled:
        return None
    from harness.tasks import load_task

    task = load_task(dict(cfg["dataset"]))
    if not getattr(task, "judged", False):
        log.info("cell %s: dataset %s is not graded by a judge", cell_dir.name, task.name)
        return None
    summary = json.loads((cell_dir / store.SUMMARY).read_text(encoding="utf-8"))
    records = store.read_records(cell_dir)
    reference, ref_cell, ref_sha = (_reference_answers(task, cfg, cell_dir, judge, summary)
                                    if "pairwise" in judge.modes else (None, None, None))
    state = {"judge": judge.identity(), "modes": list(judge.modes), "records_sha256": summary.get("records_sha256"),
             "prompts_sha256": _sha256(data_dir() / P.PROMPTS_FILE),
             "reference_answers_sha256": _sha256(P.reference_path(judge.reference_answers)),
             "reference": judge.reference if "pairwise" in judge.modes else None,
             "reference_cell": ref_cell, "reference_records_sha256": ref_sha}
    previous = read_judge_summary(cell_dir)
    if previous and previous.get("state") == state and previous.get("failed") == 0 and judge.use_cache:
        log.info("cell %s: judgments are current (%s)", cell_dir.name, JUDGE_SUMMARY)
        return previous
    root = Path(judge.cache_dir).expanduser() if judge.cache_dir else cell_dir.parent.parent / CACHE_DIRNAME
    jobs = build_jobs(task, records, judge, reference)
    log.info("cell %s: judging %d record(s) with %s %s", cell_dir.name, len(records), judge.backend, judge.model)
    run_jobs(jobs, judge, JudgmentCache(root, read=judge.use_cache))
    lines = judgment_lines(records, jobs)
    store.atomic_write_text(cell_dir / JUDGMENTS, "".join(store.dumps(line) + "\n" for line in lines))
    out = {"cell_id": cell_dir.name, "state": state, "config": {k: v for k, v in vars(judge).items()},
           "records": len(records), **_counts(lines, jobs),
           "finished_at": datetime.now(timezone.utc).isoformat(timespec="seconds")}
    store.atomic_write_json(cell_dir / JUDGE_SUMMARY, out)
    log.info("cell %s: %d judgment(s), %d from the cache, %d failed; %s", cell_dir.name, out["judgments"],
             out["from_cache"], out["failed"], ", ".join(f"{k} {out[k]:.2f}" for k in (SCORE, WIN_RATE) if k in out))
    return out
