"""Reading a judge's verdict (FastChat ``llm_judge/common.py``): a single-answer rating ``[[rating]]``, a
pairwise winner ``[[A]]`` / ``[[B]]`` / ``[[C]]`` (tie), and a pairwise game played in both orders.

A verdict that cannot be read is NaN with its reason, never a score: no ``[[n]]`` (nor FastChat's fallback
``[n]``) in the answer, or a rating outside the prompt's 1-10 scale (FastChat keeps those; here they are
malformed). FastChat records -1 for an unreadable rating and drops it from the means; NaN does the same.
"""
from __future__ import annotations

import math
import re

ONE_SCORE = re.compile(r"\[\[(\d+\.?\d*)\]\]")
ONE_SCORE_BACKUP = re.compile(r"\[(\d+\.?\d*)\]")
RATING_RANGE = (1.0, 10.0)
NAN = math.nan


def parse_rating(text: str) -> tuple[float, str | None]:
    """``(rating, None)`` or ``(NaN, reason)``."""
    if not isinstance(text, str):
        return NAN, "the judge returned no text"
    match = ONE_SCORE.search(text) or ONE_SCORE_BACKUP.search(text)
    if not match:
        return NAN, "no [[rating]] in the judge's answer"
    value = float(match.group(1))
    lo, hi = RATING_RANGE
    if not lo <= value <= hi:
        return NAN, f"rating {value:g} is outside the 1-10 scale"
    return value, None


def parse_winner(text: str) -> str:
    """``A``, ``B``, ``tie`` or ``error`` (FastChat's order of checks)."""
    if not isinstance(text, str):
        return "error"
    for tag, winner in (("[[A]]", "A"), ("[[B]]", "B"), ("[[C]]", "tie")):
        if tag in text:
            return winner
    return "error"


def game_score(g1: str, g2: str) -> tuple[float, str | None]:
    """One pairwise game as FastChat's ``show_result.py`` counts it, from the method's side: game 1 has the
    method as assistant A, game 2 (positions swapped) as B. Both must agree on a winner, else it is a tie.
    Returns 1 (win), 0.5 (tie), 0 (loss) — the mean is FastChat's ``win_rate_adjusted`` — or NaN with the
    reason when either verdict is unreadable (FastChat drops those games)."""
    if g1 == "error" or g2 == "error":
        return NAN, "no [[A]]/[[B]]/[[C]] verdict in the judge's answer" + (" (both orders)" if g1 == g2 else "")
    first = {"A": "method", "B": "reference"}.get(g1, g1)
    second = {"A": "reference", "B": "method"}.get(g2, g2)
    if first == "tie" or first != second:
        return 0.5, None
    return (1.0 if first == "method" else 0.0), None
