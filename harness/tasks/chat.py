"""Open-ended instruction prompt sets, where quality is the output's perplexity under the target
model (computed by the runner for every task), plus ROUGE against reference outputs where the data
has them (Alpaca).

- ``mt_bench``: MT-Bench (Zheng et al. 2023), 80 questions in 8 categories. First turn only: the
  second turn needs the model's own first answer, and MT-Bench's quality score is a GPT-4 judgement,
  out of reach offline — so quality here is target perplexity (seed 002 does the same).
- ``spec_bench``: Spec-Bench (Xia et al. 2024), the usual speculative-decoding speed set: 480
  prompts in 13 categories (the 8 MT-Bench ones, 10 each, and translation, summarization, qa,
  math_reasoning, rag, 80 each); first turns; ``meta["category"]`` for per-category results.
- ``alpaca``: 80 Alpaca instructions (Taori et al. 2023; the EAGLE subset) with reference outputs;
  scored with ROUGE as seed 002 (Fig. 1) scores outputs against example outputs. The full data
  loads with ``hf_dataset: tatsu-lab/alpaca``, ``hf_split: train``.
- ``chatgpt_prompts``: 220 awesome-chatgpt-prompts (act, prompt), the offline substitute for
  MohamedRashad/ChatGPT-prompts (seed 002); the real set loads with ``hf_dataset`` and ``columns``
  mapping its prompt column to ``prompt``.

Prompts (the seeds give none): the chat template when the tokenizer has one; otherwise the Vicuna
v1.1 conversation format that MT-Bench and Spec-Bench use for their reference models (FastChat),
and the Alpaca template for Alpaca.
"""
from __future__ import annotations

from dataclasses import dataclass

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
    kind = "mt_bench"
    primary_metric = "mt_bench_score"  # the judge's 1-10 score (harness/judge); without a judge: perplexity
    path: str = "mt_bench/question.jsonl"
    template: str = VICUNA_TEMPLATE
    user_template: str = "{prompt}"

    def example(self, row: dict, index: int) -> Example:
        return self.make_example(row["question_id"], {"prompt": row["turns"][0]}, meta={"category": row["category"]})


@register_task
@dataclass
class SpecBench(MTBench):
    kind = "spec_bench"
    path: str = "spec_bench/question.jsonl"


@register_task
@dataclass
class Alpaca(TemplateTask):
    kind = "alpaca"
    primary_metric = "rougeL"
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
