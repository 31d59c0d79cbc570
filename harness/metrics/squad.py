"""SQuAD v1.1 answer metrics (Rajpurkar et al. 2016): exact match and token F1 after the official
normalisation (lower case, drop ASCII punctuation, drop the articles a/an/the, collapse white
space); the best score over the gold answers counts."""
from __future__ import annotations

import re
import string
from collections import Counter

_PUNCTUATION = set(string.punctuation)
_ARTICLES = re.compile(r"\b(a|an|the)\b")


def normalize_answer(text: str) -> str:
    text = "".join(ch for ch in text.lower() if ch not in _PUNCTUATION)
    return " ".join(_ARTICLES.sub(" ", text).split())


def exact_match(prediction: str, golds: list[str]) -> float:
    pred = normalize_answer(prediction)
    return float(any(pred == normalize_answer(g) for g in golds))


def _token_f1(prediction: str, gold: str) -> float:
    pred, ref = normalize_answer(prediction).split(), normalize_answer(gold).split()
    common = sum((Counter(pred) & Counter(ref)).values())
    if common == 0:
        return 0.0
    precision, recall = common / len(pred), common / len(ref)
    return 2 * precision * recall / (precision + recall)


def f1(prediction: str, golds: list[str]) -> float:
    return max(_token_f1(prediction, g) for g in golds)
