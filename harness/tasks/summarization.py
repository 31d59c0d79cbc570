"""News summarisation: CNN/DailyMail (See et al. 2017; mtad reports ROUGE-L) and XSum
(Narayan et al. 2018; the adaptive paper). Metrics: ``rouge1``, ``rouge2``, ``rougeL``, ``rougeLsum``
F-measures in [0, 1] (:mod:`harness.metrics.rouge`).

Shipped: 80 CNN/DM test articles (the EAGLE / Spec-Bench summarisation set, stored in the HF
``cnn_dailymail`` schema: ``article``, ``highlights``) and 1,000 XSum test documents (HF ``xsum``
schema: ``document``, ``summary``). Full test sets: ``hf_dataset: abisee/cnn_dailymail`` with
``hf_config: 3.0.0``, or ``hf_dataset: EdinburghNLP/xsum``.

Prompts: XSum follows the adaptive paper (App. C.1, Table 5): its system prompt, the article as the user
message. CNN/DM (no prompt in the papers): plain ``Article: … TL;DR:`` (the zero-shot summarisation
cue of Radford et al. 2019); under a chat template the Spec-Bench user message ``Summarize: …``.
``max_document_words`` cuts long documents for short-context models (off by default).
"""
from __future__ import annotations

from dataclasses import dataclass, field

from harness.metrics.rouge import rouge
from harness.tasks.base import Example, check_limit, register_task
from harness.tasks.templated import TemplateTask


@dataclass
class Summarization(TemplateTask):
    primary_metric = "rougeL"  # mtad Table 6 (CNN/DM): Rouge-L
    requires = ("rouge_score",)
    max_document_words: int | None = None

    def __post_init__(self):
        super().__post_init__()
        if self.max_document_words is not None:
            check_limit(self.max_document_words, "dataset.max_document_words", 1, 10_000_000, integer=True)

    def example(self, row: dict, index: int) -> Example:
        words = row["document"].split()
        document = " ".join(words[: self.max_document_words]) if self.max_document_words else row["document"]
        return self.make_example(row.get("id", index), {"document": document}, reference=row["summary"])

    def score(self, example: Example, output: str) -> dict[str, float]:
        return rouge(output, example.reference)


@register_task
@dataclass
class CnnDailyMail(Summarization):
    kind = "cnndm"
    path: str = "cnndm/test.jsonl"
    columns: dict[str, str] = field(default_factory=lambda: {"document": "article", "summary": "highlights"})
    template: str = "Article: {document}\n\nTL;DR:"
    user_template: str = "Summarize: {document}"


@register_task
@dataclass
class XSum(Summarization):
    kind = "xsum"
    path: str = "xsum/xsum-1000.jsonl"
    system_prompt: str = ("You write two sentence summaries of new articles. Do not write any more. "
                          "Keep it brief and to the point.")
    template: str = "{system_prompt}\n\nArticle: {document}\n\nSummary:"
    user_template: str = "{document}"
