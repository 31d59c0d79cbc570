"""SQuAD v1.1 extractive question answering (Rajpurkar et al. 2016); the dsbd paper reports EM.

Shipped: the 1,190 XQuAD-en questions (240 SQuAD v1.1 dev paragraphs, original question ids, one
gold answer each where dev has about three, so EM is slightly stricter than on the full dev set).
The full dev set: ``path`` to ``dev-v1.1.json``, or ``hf_dataset: rajpurkar/squad`` with
``hf_split: validation``. Prompt (the papers give none): an instruction, the paragraph, the question
and ``Answer:``; the first line of the output is the answer. Metrics: ``exact_match`` and ``f1``
in [0, 1] with the official normalisation.
"""
from __future__ import annotations

import json
from dataclasses import dataclass
from pathlib import Path

from harness.metrics.squad import exact_match, f1
from harness.tasks.base import Example, register_task
from harness.tasks.templated import TemplateTask

INSTRUCTION = "Answer the question with a short span copied from the context."


def flatten_squad(path: Path) -> list[dict]:
    """SQuAD-format JSON (data → paragraphs → qas) → rows in the HF ``squad`` schema."""
    rows = []
    for article in json.loads(path.read_text(encoding="utf-8"))["data"]:
        for paragraph in article["paragraphs"]:
            for qa in paragraph["qas"]:
                rows.append({"id": qa["id"], "title": article.get("title", ""), "context": paragraph["context"],
                             "question": qa["question"], "answers": {"text": [a["text"] for a in qa["answers"]]}})
    return rows


@register_task
@dataclass
class Squad(TemplateTask):
    kind = "squad"
    primary_metric = "exact_match"  # dsbd §4.1: EM
    path: str = "squad/xquad.en.json"
    hf_split: str = "validation"
    template: str = INSTRUCTION + "\n\nContext: {context}\nQuestion: {question}\nAnswer:"
    user_template: str = INSTRUCTION + " Reply with the answer only.\n\nContext: {context}\nQuestion: {question}"

    def read(self, path: Path) -> list[dict]:
        return flatten_squad(path) if path.suffix == ".json" else super().read(path)

    def example(self, row: dict, index: int) -> Example:
        fields = {"context": row["context"], "question": row["question"], "title": row.get("title", "")}
        return self.make_example(row["id"], fields, reference=list(row["answers"]["text"]))

    def truncate(self, text: str) -> str:
        """The answer is the first non-empty line (leading white space skipped before the stops)."""
        return super().truncate(text.lstrip())

    def score(self, example: Example, output: str) -> dict[str, float]:
        answer = output.strip()
        return {"exact_match": exact_match(answer, example.reference), "f1": f1(answer, example.reference)}
