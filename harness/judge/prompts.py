"""MT-Bench judge prompts (Zheng et al. 2023), filled exactly as FastChat's ``llm_judge/common.py`` fills them.

The prompt texts ship unchanged in ``tasks/mt_bench/judge_prompts.jsonl`` (FastChat, Apache-2.0; see
its PROVENANCE.md). Which prompt grades what, as FastChat's ``gen_judgment.py``: turn 1 ``single-v1``,
turn 2 ``single-v1-multi-turn`` (the whole conversation, graded on the second answer); for the categories
FastChat grades against a reference answer (``NEED_REF_CATS``: math, reasoning, coding) ``single-math-v1``
and ``single-math-v1-multi-turn`` with the GPT-4 reference answers; pairwise the ``pair-*`` prompts. A
prompt's version is its name and a hash of its texts, so an edited prompt is never served from the cache.
"""
from __future__ import annotations

import functools
import hashlib
import json
from dataclasses import dataclass
from pathlib import Path

from harness.resources import data_dir

PROMPTS_FILE = "mt_bench/judge_prompts.jsonl"
NEED_REF_CATS = ("math", "reasoning", "coding")  # FastChat common.py


@dataclass(frozen=True)
class JudgePrompt:
    """One filled judge prompt: the chat messages sent to the judge and the prompt's name and version."""

    name: str
    version: str
    system: str
    user: str
    #: the texts filled into the template (questions, answers, references): what a verdict is not read from
    data: str = ""

    @property
    def messages(self) -> list[dict]:
        return [{"role": "system", "content": self.system}, {"role": "user", "content": self.user}]


def reference_path(path: str) -> Path:
    p = Path(path).expanduser()
    return p if p.is_absolute() else data_dir() / p


@functools.lru_cache(maxsize=None)
def judge_prompts() -> dict[str, dict]:
    """FastChat's judge prompts by name (``single-v1``, ``pair-v2``, ...)."""
    text = (data_dir() / PROMPTS_FILE).read_text(encoding="utf-8")
    return {row["name"]: row for row in map(json.loads, filter(str.strip, text.splitlines()))}


def prompt_version(name: str) -> str:
    row = judge_prompts()[name]
    digest = hashlib.sha256(json.dumps([row["system_prompt"], row["prompt_template"]]).encode()).hexdigest()
    return f"{name}@{digest[:12]}"


@functools.lru_cache(maxsize=8)
def reference_answers(path: str) -> dict[str, list[str]]:
    """Reference answers by question id (a FastChat model-answer file: ``choices[0].turns``)."""
    rows = map(json.loads, filter(str.strip, reference_path(path).read_text(encoding="utf-8").splitlines()))
    return {str(r["question_id"]): list(r["choices"][0]["turns"]) for r in rows}


def needs_reference(category: str) -> bool:
    return category in NEED_REF_CATS


def _fill(name: str, **fields) -> JudgePrompt:
    row = judge_prompts()[name]
    return JudgePrompt(name, prompt_version(name), row["system_prompt"], row["prompt_template"].format(**fields),
                       "\n".join(str(v) for v in fields.values()))


def _refs(ref: list[str] | None) -> dict:
    return {} if ref is None else {"ref_answer_1": ref[0], "ref_answer_2": ref[1] if len(ref) > 1 else ""}


def single_prompt(questions: list[str], answers: list[str], ref: list[str] | None) -> JudgePrompt:
    """Single-answer grading of the last turn (1 or 2) of a conversation; ``ref``: the reference answers, for
    the categories that are graded against them (else None)."""
    base = "single-math-v1" if ref is not None else "single-v1"
    if len(answers) == 1:
        return _fill(base, question=questions[0], answer=answers[0], **_refs(ref))
    return _fill(base + "-multi-turn", question_1=questions[0], question_2=questions[1], answer_1=answers[0],
                 answer_2=answers[1], **_refs(ref))


def pair_prompt(questions: list[str], answers_a: list[str], answers_b: list[str], ref: list[str] | None) -> JudgePrompt:
    """Pairwise grading of assistant A against assistant B on the last turn (FastChat ``pair-v2`` family)."""
    base = "pair-math-v1" if ref is not None else "pair-v2"
    if len(answers_a) == 1:
        return _fill(base, question=questions[0], answer_a=answers_a[0], answer_b=answers_b[0], **_refs(ref))
    return _fill(base + "-multi-turn", question_1=questions[0], question_2=questions[1], answer_a_1=answers_a[0],
                 answer_b_1=answers_b[0], answer_a_2=answers_a[1], answer_b_2=answers_b[1], **_refs(ref))
