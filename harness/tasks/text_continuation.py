"""Plain text continuation from a JSONL file of ``{"text": ...}`` rows (the default prompt set).

Quality is the output's perplexity under the target model (computed by the runner for every
task); there is no reference metric.
"""
from __future__ import annotations

import json
from dataclasses import dataclass

from harness.tasks.base import Example, Task, check_limit, register_task


@register_task
@dataclass
class TextContinuation(Task):
    kind = "text_continuation"
    path: str = "kjv_heldout/heldout.jsonl"
    text_field: str = "text"
    id_field: str = "citation"
    prompt_words: int = 12  # the prompt is the first N words of each row

    def __post_init__(self):
        super().__post_init__()
        check_limit(self.prompt_words, "dataset.prompt_words", 1, 100_000, integer=True)

    def load(self) -> list[Example]:
        rows = [json.loads(line) for line in self.resolve(self.path).read_text(encoding="utf-8").splitlines() if line]
        out = []
        for i, row in enumerate(rows):
            words = row[self.text_field].split()
            if len(words) <= self.prompt_words:
                continue
            out.append(Example(id=str(row.get(self.id_field, i)), prompt=" ".join(words[: self.prompt_words]),
                               reference=" ".join(words[self.prompt_words:])))
        return out
