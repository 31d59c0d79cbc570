"""Open-ended instruction prompt sets, where quality is the output's perplexity under the target
model (computed by the runner for every task), plus ROUGE against reference outputs where the data
has them (Alpaca).

- ``mt_bench``: MT-Bench (Zheng et al. 2023), 80 two-turn questions in 8 categories. Both turns
  (``turns: 2``): each turn is one prompt and one record; the second turn's prompt holds the cell's own
  first answer (cut at the stop string and stripped, as FastChat's ``gen_model_answer.py`` does), built
  by the runner once that answer exists (:meth:`MTBench.with_history`). ``num_prompts`` counts questions.
  Quality: the MT-Bench score of an LLM judge (``judge=openai|hf``, :mod:`harness.judge`; the task's
  primary metric ``mt_bench_score``), and target perplexity as for every task.
- ``spec_bench``: Spec-Bench (Xia et al. 2024), the usual speculative-decoding speed set: 480
  prompts in 13 categories (the 8 MT-Bench ones, 10 each, and translation, summarization, qa,
  math_reasoning, rag, 80 each); first turns; ``meta["category"]`` for per-category results.
- ``alpaca``: 80 Alpaca instructions (Taori et al. 2023; the EAGLE subset) with reference outputs;
  scored with ROUGE as the mtad paper (Fig. 1) scores outputs against example outputs. The full data
  loads with ``hf_dataset: tatsu-lab/alpaca``, ``hf_split: train``.
- ``chatgpt_prompts``: 220 awesome-chatgpt-prompts (act, prompt), the offline substitute for
  MohamedRashad/ChatGPT-prompts (mtad); the real set loads with ``hf_dataset`` and ``columns``
  mapping its prompt column to ``prompt``.

Prompts (the papers give none): the chat template when the tokenizer has one; otherwise the Vicuna
v1.1 conversation format that MT-Bench and Spec-Bench use for their reference models (FastChat),
and the Alpaca template for Alpaca.
"""
from __future__ import annotations

import dataclasses
from dataclasses import dataclass
from typing import ClassVar

from harness.errors import ConfigError
from harness.metrics.rouge import rouge
from harness.tasks.base import Example, register_task
from harness.tasks.templated import TemplateTask

VICUNA_SYSTEM = ("A chat between a curious user and an artificial intelligence assistant. "
                 "The assistant gives helpful, detailed, and polite answers to the user's questions.")
VICUNA_TEMPLATE = VICUNA_SYSTEM + " USER: {prompt} ASSISTANT:"
ALPACA_TEMPLATE = ("Below is an instruction that describes a task. Write a response that appropriately completes "
                   "the request.\n\n### Instruction:\n{prompt}\n\n### Response:\n")


@register_task
@dataclass
class MTBench(TemplateTask):
    """MT-Bench: ``turns`` prompts per question (1 = first turns only). Turn k's example id is
    ``<question_id>-t<k>`` (turn 1 keeps the question id); ``meta`` holds ``category``, ``question_id`` and
    ``turn``. The plain prompt of turn k continues turn k-1's with ``followup_template`` (Vicuna v1.1, as
    FastChat: ``... ASSISTANT: <answer></s>USER: <question> ASSISTANT:``); with a chat template the earlier
    answers are assistant messages. Before those answers exist (validation, ``Decoder.prepare``'s prompt
    features) a later turn stands as its own question alone."""

    kind = "mt_bench"
    primary_metric: ClassVar[str | None] = "mt_bench_score"  # the judge's 1-10 rating (harness.judge)
    higher_is_better: ClassVar[bool] = True
    judged: ClassVar[bool] = True  # graded by harness.judge when a judge is configured
    path: str = "mt_bench/question.jsonl"
    template: str = VICUNA_TEMPLATE
    user_template: str = "{prompt}"
    turns: int = 2
    followup_template: str = " {answer}</s>USER: {prompt} ASSISTANT:"

    def __post_init__(self):
        super().__post_init__()
        if isinstance(self.turns, bool) or not isinstance(self.turns, int) or self.turns < 1:
            raise ConfigError(f"dataset.turns must be an integer >= 1 (1 = first turns only), got {self.turns!r}")

    def example(self, row: dict, index: int) -> Example:
        qid = row["question_id"]
        return self.make_example(qid, {"prompt": row["turns"][0]},
                                 meta={"category": row.get("category", ""), "question_id": qid, "turn": 1})

    def questions(self) -> dict[str, dict]:
        """The data rows by question id (as a string); read once."""
        if getattr(self, "_questions", None) is None:
            self._questions = {str(row["question_id"]): row for row in self.rows()}
        return self._questions

    def examples(self) -> list[Example]:
        """Every turn of the selected questions (``num_prompts`` / ``sample_seed`` select questions), in order."""
        firsts = super().examples()
        rows = self.questions() if self.turns > 1 else {}
        out = []
        for first in firsts:
            out.append(first)
            later = rows[first.id]["turns"][1:self.turns] if rows else []
            for k, text in enumerate(later, start=2):
                ex = self.make_example(f"{first.id}-t{k}", {"prompt": text}, meta={**first.meta, "turn": k})
                ex.history = [first.id] + [f"{first.id}-t{j}" for j in range(2, k)]
                out.append(ex)
        return out

    def with_history(self, example: Example, records: list[dict]) -> Example:
        answers: dict[str, str] = {r["example_id"]: r["output_text"] for r in records
                                   if isinstance(r.get("output_text"), str) and "example_id" in r}
        missing = [h for h in example.history if h not in answers]
        if missing:
            raise ValueError(f"turn {example.id} needs the cell's answers to {missing}, which it has not written")
        row = self.questions()[str(example.meta["question_id"])]
        questions = row["turns"][:len(example.history) + 1]
        said = [self.truncate(answers[h]).strip() for h in example.history]
        prompt = self.template.format(prompt=questions[0], system_prompt=self.system_prompt)
        messages = [{"role": "system", "content": self.system_prompt}] if self.system_prompt else []
        messages.append({"role": "user", "content": self.user_template.format(prompt=questions[0],
                                                                              system_prompt=self.system_prompt)})
        for answer, question in zip(said, questions[1:]):
            prompt += self.followup_template.format(answer=answer, prompt=question)
            messages += [{"role": "assistant", "content": answer},
                         {"role": "user", "content": self.user_template.format(prompt=question,
                                                                               system_prompt=self.system_prompt)}]
        return dataclasses.replace(example, prompt=prompt, messages=messages)


@register_task
@dataclass
class SpecBench(MTBench):
    """Spec-Bench's prompt sets by category (issue 33.7): ``categories`` keeps only the named ones (null = all 13),
    ``per_category`` the first N of each (null = all): ``dataset.per_category=2`` is a 26-prompt run that still
    fills every row of the report's per-category table. ``num_prompts`` / ``sample_seed`` then apply as usual."""

    kind = "spec_bench"
    primary_metric: ClassVar[str | None] = None  # a speed set: quality is target perplexity
    judged: ClassVar[bool] = False
    path: str = "spec_bench/question.jsonl"
    turns: int = 1
    categories: list[str] | None = None
    per_category: int | None = None

    def __post_init__(self):
        super().__post_init__()
        if self.per_category is not None and not (isinstance(self.per_category, int)
                                                  and not isinstance(self.per_category, bool)
                                                  and self.per_category >= 1):
            raise ConfigError(f"dataset.per_category must be an integer >= 1, or null (every prompt of each category), "
                              f"got {self.per_category!r}", key="dataset.per_category")
        if self.categories is not None and (not isinstance(self.categories, (list, tuple)) or not self.categories
                                            or not all(isinstance(c, str) for c in self.categories)):
            raise ConfigError(f"dataset.categories must be a non-empty list of category names, or null (all), got "
                              f"{self.categories!r}", key="dataset.categories")

    def load(self) -> list[Example]:
        items = super().load()
        have = list(dict.fromkeys(e.meta.get("category", "") for e in items))
        if self.categories is not None:
            unknown = [c for c in self.categories if c not in have]
            if unknown:
                raise ConfigError(f"dataset.categories: unknown {', '.join(map(repr, unknown))}; this set has "
                                  f"{', '.join(have)}", key="dataset.categories")
            items = [e for e in items if e.meta.get("category") in self.categories]
        if self.per_category is not None:
            seen: dict[str, int] = {}
            keep = []
            for e in items:
                seen[e.meta.get("category", "")] = n = seen.get(e.meta.get("category", ""), 0) + 1
                if n <= self.per_category:
                    keep.append(e)
            items = keep
        return items


@register_task
@dataclass
class Alpaca(TemplateTask):
    kind = "alpaca"
    primary_metric = "rougeL"
    requires = ("rouge_score",)
    path: str = "alpaca/question.jsonl"
    template: str = ALPACA_TEMPLATE
    user_template: str = "{prompt}"

    def example(self, row: dict, index: int) -> Example:
        if "instruction" in row:  # the HF tatsu-lab/alpaca schema
            prompt = f"{row['instruction']}\n\n{row['input']}" if row.get("input") else row["instruction"]
            return self.make_example(index, {"prompt": prompt}, reference=row["output"])
        return self.make_example(row["question_id"], {"prompt": row["turns"][0]}, reference=row["reference"][0])

    def score(self, example: Example, output: str) -> dict[str, float]:
        return rouge(output, example.reference)


@register_task
@dataclass
class ChatGPTPrompts(TemplateTask):
    kind = "chatgpt_prompts"
    path: str = "chatgpt_prompts/prompts.csv"
    template: str = VICUNA_TEMPLATE
    user_template: str = "{prompt}"

    def example(self, row: dict, index: int) -> Example:
        return self.make_example(index, {"prompt": row["prompt"]}, meta={"category": row.get("act", "")})
