"""Grading records: one judgment job per record and mode (pairwise: two, one per order), answered from the
cache or by the judge, then read into the record's judgment fields.

Per record (one record = one turn of one question):

- ``metric.mt_bench_score`` and ``metric.mt_bench_score_turn<k>`` — the 1-10 rating (single-answer grading);
  their mean over a cell's records is the MT-Bench score (FastChat's average over turns) and its per-turn
  scores;
- ``metric.mt_bench_win_rate`` and ``..._turn<k>`` — pairwise against the reference method: 1 win, 0.5 tie,
  0 loss (mean: FastChat's ``win_rate_adjusted``);
- ``judge.*`` — the prompt used, the judge's text, whether it came from the cache, its time (ms), and the
  reason when the metric is NaN (the judge failed, its verdict was unreadable, a reference is missing).
"""
from __future__ import annotations

import logging
import math
import time
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from functools import partial

from harness.judge import prompts as P
from harness.judge.cache import JudgmentCache, judgment_key
from harness.judge.client import JudgeFailure, OpenAIJudge
from harness.judge.config import JudgeConfig
from harness.judge.verdict import game_score, parse_rating, parse_winner

log = logging.getLogger("harness")
NAN = math.nan
SCORE, WIN_RATE = "mt_bench_score", "mt_bench_win_rate"


def make_judge(cfg: JudgeConfig):
    """The judge a config names (loads a local model for ``hf``); :class:`JudgeFailure` when it cannot be had."""
    if cfg.backend == "openai":
        return OpenAIJudge(cfg)
    if cfg.backend == "hf":
        from harness.judge.local import LocalJudge

        try:
            return LocalJudge(cfg)
        except Exception as e:  # an unloadable judge fails its judgments, never the cell
            raise JudgeFailure(f"the local judge {cfg.model} could not be loaded: {type(e).__name__}: {e}") from e
    raise JudgeFailure(f"no judge for backend {cfg.backend!r}")


@dataclass
class Job:
    """One judgment: record ``index`` graded by ``kind`` (single, or pairwise game g1 / g2), or why it cannot be."""

    index: int
    kind: str  # "single" | "g1" (the method is assistant A) | "g2" (the method is assistant B)
    question_id: str
    turn: int
    prompt: P.JudgePrompt | None = None
    reason: str | None = None
    key: str = ""
    output: str | None = None
    cached: bool = False
    ms: float = NAN

    @property
    def asked(self) -> P.JudgePrompt:
        """The prompt of a job that was put to the judge (every job with an output has one)."""
        if self.prompt is None:
            raise ValueError(f"judgment {self.kind} of record {self.index} has no prompt: {self.reason}")
        return self.prompt


def answer_text(task, record: dict) -> str | None:
    """The answer as graded: the output cut at the task's stop string and stripped (FastChat)."""
    text = record.get("output_text")
    return task.truncate(text).strip() if isinstance(text, str) else None


def _conversation(task, record: dict, answers: dict) -> tuple[str, int, list[str], list, str]:
    """(question id, turn, the questions up to this turn, the cell's answers to them, category). Records written
    before MT-Bench had two turns name their question by ``example_id`` only (turn 1)."""
    qid = record.get("meta.question_id")
    qid = str(qid) if qid is not None else str(record.get("example_id")).split("-t")[0]
    turn = int(record.get("meta.turn") or 1)
    row = task.questions().get(qid) or {}
    ids = [qid] + [f"{qid}-t{k}" for k in range(2, turn + 1)]
    return qid, turn, list(row.get("turns") or [])[:turn], [answers.get(i) for i in ids], str(row.get("category", ""))


def build_jobs(task, records: list[dict], cfg: JudgeConfig, reference: dict | str | None) -> list[Job]:
    """Jobs for every record. ``reference``: the reference method's answers by example id (pairwise), or the
    reason there are none."""
    answers = {r.get("example_id"): answer_text(task, r) for r in records}
    refs = P.reference_answers(cfg.reference_answers)
    jobs = []
    for r in records:
        qid, turn, questions, said, category = _conversation(task, r, answers)
        why = None
        if len(questions) < turn:
            why = f"question {qid} has no turn {turn} in the data"
        elif turn > 2:
            why = f"turn {turn}: the MT-Bench judge prompts grade turns 1 and 2"
        elif any(a is None for a in said):
            why = f"the cell has no answer to an earlier turn of question {qid}"
        elif P.needs_reference(category) and qid not in refs:
            why = f"no reference answer for question {qid} (category {category} is graded against one: " \
                  "judge.reference_answers)"
        ref = refs.get(qid) if P.needs_reference(category) else None
        new = partial(Job, int(r["index"]), question_id=qid, turn=turn, reason=why)
        if "single" in cfg.modes:
            jobs.append(new("single"))
            if why is None:
                jobs[-1].prompt = P.single_prompt(questions, said, ref)
        if "pairwise" in cfg.modes:
            g1, g2 = new("g1"), new("g2")
            if why is None and isinstance(reference, dict):
                other = [reference.get(i) for i in [qid] + [f"{qid}-t{k}" for k in range(2, turn + 1)]]
                given = [a for a in other if a is not None]
                if len(given) < len(other):
                    g1.reason = g2.reason = f"the reference cell has no answer to question {qid} turn {turn}"
                else:
                    g1.prompt = P.pair_prompt(questions, said, given, ref)
                    g2.prompt = P.pair_prompt(questions, given, said, ref)
            elif why is None:
                g1.reason = g2.reason = reference if isinstance(reference, str) and reference else \
                    "no reference answers"
            jobs += [g1, g2]
    return jobs


def run_jobs(jobs: list[Job], cfg: JudgeConfig, cache: JudgmentCache) -> None:
    """Answer every job that has a prompt: from the cache, else from the judge (loaded only when needed)."""
    judge_id = cfg.identity()
    todo = []
    for job in jobs:
        if job.prompt is None:
            continue
        job.key = judgment_key(judge_id, job.prompt.version, job.question_id, job.turn, job.prompt.messages)
        hit = cache.get(job.key)
        if hit is not None:
            job.output, job.cached, job.ms = hit["output"], True, float(hit.get("ms", NAN))
        else:
            todo.append(job)
    if not todo:
        return
    try:
        judge = make_judge(cfg)
    except JudgeFailure as e:
        for job in todo:
            job.reason = str(e)
        return
    scrub = getattr(judge, "scrub", lambda s: s)

    def one(job: Job) -> None:
        start = time.perf_counter()
        try:
            output = judge.complete(job.asked.messages)
        except JudgeFailure as e:
            job.reason = str(e)
            return
        except Exception as e:  # noqa: BLE001 — a crashing judge fails this judgment, never the cell
            job.reason = scrub(f"the judge failed: {type(e).__name__}: {e}")
            return
        job.ms = (time.perf_counter() - start) * 1e3
        job.output = output
        cache.put(job.key, {"judge": judge_id, "prompt": job.asked.version, "question_id": job.question_id,
                            "turn": job.turn, "output": output, "ms": job.ms,
                            "at": time.strftime("%Y-%m-%dT%H:%M:%S%z")})

    workers = cfg.parallel if cfg.backend == "openai" else 1
    try:
        if workers > 1:
            with ThreadPoolExecutor(workers) as pool:
                list(pool.map(one, todo))
        else:
            for job in todo:
                one(job)
    finally:
        getattr(judge, "close", lambda: None)()


def _single_fields(job: Job, turn: int) -> dict:
    score, reason = parse_rating(job.output, job.asked.data) if job.output is not None else (NAN, job.reason)
    return {f"metric.{SCORE}": score, f"metric.{SCORE}_turn{turn}": score,
            "judge.prompt": job.prompt.name if job.prompt else None, "judge.reason": reason,
            "judge.text": job.output, "judge.cached": job.cached, "judge.ms": job.ms}


def _pair_fields(g1: Job, g2: Job, turn: int) -> dict:
    winners = [parse_winner(g.output, g.asked.data) if g.output is not None else "error" for g in (g1, g2)]
    if g1.output is None or g2.output is None:
        score, reason = NAN, g1.reason or g2.reason
    else:
        score, reason = game_score(*winners)
    return {f"metric.{WIN_RATE}": score, f"metric.{WIN_RATE}_turn{turn}": score,
            "judge.pair_prompt": g1.prompt.name if g1.prompt else None, "judge.pair_reason": reason,
            "judge.pair_winners": winners, "judge.pair_texts": [g1.output, g2.output],
            "judge.pair_cached": g1.cached and g2.cached, "judge.pair_ms": g1.ms + g2.ms}


def judgment_lines(records: list[dict], jobs: list[Job]) -> list[dict]:
    """One line of judgment fields per record (``index`` and ``example_id`` name the record)."""
    by = {(j.index, j.kind): j for j in jobs}
    lines = []
    for r in records:
        i, turn = int(r["index"]), int(r.get("meta.turn") or 1)
        line = {"index": i, "example_id": r.get("example_id")}
        if (i, "single") in by:
            line.update(_single_fields(by[(i, "single")], turn))
        if (i, "g1") in by:
            line.update(_pair_fields(by[(i, "g1")], by[(i, "g2")], turn))
        lines.append(line)
    return lines
