"""Final numeric answers for GSM8K (Cobbe et al. 2021): the gold answer follows ``####``; a model's
answer is the number after its own ``####``, else after "answer is", else its last number."""
from __future__ import annotations

import re
from fractions import Fraction

_NUMBER = r"-?\$?\d[\d,]*(?:\.\d+)?"
_MARKED = (re.compile(rf"####\s*({_NUMBER})"), re.compile(rf"answer is[:\s]*({_NUMBER})", re.IGNORECASE))
_ANY = re.compile(_NUMBER)


def parse_number(text: str) -> Fraction | None:
    cleaned = text.replace(",", "").replace("$", "")
    try:
        return Fraction(cleaned)
    except (ValueError, ZeroDivisionError):
        return None


def final_number(text: str) -> Fraction | None:
    """The answer a solution commits to, or None when it states no number."""
    for pattern in _MARKED:
        found = pattern.findall(text)
        if found:
            return parse_number(found[0])
    found = _ANY.findall(text)
    return parse_number(found[-1]) if found else None


def answer_correct(prediction: str, gold: str) -> float:
    """1.0 when the prediction's final number equals the gold final number exactly."""
    pred, ref = final_number(prediction), final_number(gold)
    return float(pred is not None and pred == ref)
