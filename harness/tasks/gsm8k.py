"""GSM8K grade-school maths (Cobbe et al. 2021), test split; the adaptive paper uses it.

Shipped: the 1,319 test problems (``question``, ``answer`` ending in ``#### N``); the same schema
loads from ``hf_dataset: openai/gsm8k`` with ``hf_config: main``. Prompt: the adaptive paper's system prompt
(App. C.1, Table 5) — in front of ``Question: … Answer:`` in the plain prompt, as the system message
under a chat template. Metric: ``accuracy`` — the output's final number equals the gold one
(:mod:`harness.metrics.math_answer`).
"""
from __future__ import annotations

from dataclasses import dataclass

from harness.metrics.math_answer import answer_correct
from harness.tasks.base import Example, register_task
from harness.tasks.templated import TemplateTask


@register_task
@dataclass
class GSM8K(TemplateTask):
    kind = "gsm8k"
    primary_metric = "accuracy"
    path: str = "gsm8k/test.jsonl"
    system_prompt: str = ("You are given a math question, and your task is to answer it. Then provide a step-by-step "
                          "walkthrough on how you got the answer to the question.")
    template: str = "{system_prompt}\n\nQuestion: {question}\nAnswer:"
    user_template: str = "{question}"

    def example(self, row: dict, index: int) -> Example:
        return self.make_example(row.get("id", index), {"question": row["question"]}, reference=row["answer"])

    def score(self, example: Example, output: str) -> dict[str, float]:
        return {"accuracy": answer_correct(output, example.reference)}
