"""ROUGE-1/2/L/Lsum F-measures with Google's ``rouge-score`` (Porter stemming on).

ROUGE-Lsum scores summary-level LCS over sentences, which ``rouge-score`` reads as lines; texts
without line breaks are split after ``.``, ``!`` or ``?`` followed by white space (the shipped
CNN/DM highlights are space-joined sentences)."""
from __future__ import annotations

import re
from functools import lru_cache

ROUGE_TYPES = ("rouge1", "rouge2", "rougeL", "rougeLsum")
_SENTENCE_END = re.compile(r"(?<=[.!?])\s+")


@lru_cache(maxsize=1)
def _scorer():
    try:  # imported here: rouge-score is the optional extra [tasks], not needed by the default install
        from rouge_score import rouge_scorer
    except ImportError as e:
        from harness.errors import ConfigError

        raise ConfigError("ROUGE needs the rouge-score package: pip install 'decoding-harness[tasks]'") from e
    return rouge_scorer.RougeScorer(list(ROUGE_TYPES), use_stemmer=True)


def sentence_lines(text: str) -> str:
    text = text.strip()
    if "\n" in text:
        return "\n".join(line.strip() for line in text.splitlines() if line.strip())
    return "\n".join(s for s in _SENTENCE_END.split(text) if s)


def rouge(prediction: str, reference: str) -> dict[str, float]:
    """F-measures in [0, 1], keyed ``rouge1``, ``rouge2``, ``rougeL``, ``rougeLsum``."""
    scores = _scorer().score(sentence_lines(reference), sentence_lines(prediction))
    return {k: scores[k].fmeasure for k in ROUGE_TYPES}
