"""Reading a judge's verdict (FastChat ``llm_judge/common.py``): a single-answer rating ``[[rating]]``, a
pairwise winner ``[[A]]`` / ``[[B]]`` / ``[[C]]`` (tie), and a pairwise game played in both orders.

The verdict is read only from the judge's own text: a marker whose exact text also appears in what the
judge was shown (``given``: the texts filled into the judge prompt — the question, the answers, the references) may
be the judge quoting the answer it grades, and is never read (FastChat reads the first marker anywhere, so
an answer holding ``[[10]]`` that the judge quotes sets its own score). Of the markers left, all must agree.

A verdict that cannot be read is NaN with its reason, never a score: no ``[[n]]`` (nor FastChat's fallback
``[n]``) of the judge's own, markers of its own that disagree, or a rating outside the prompt's 1-10 scale
(FastChat keeps those; here they are malformed). FastChat records -1 for an unreadable rating and drops it
from the means; NaN does the same.
"""
from __future__ import annotations

import math
import re

ONE_SCORE = re.compile(r"\[\[(\d+\.?\d*)\]\]")
ONE_SCORE_BACKUP = re.compile(r"\[(\d+\.?\d*)\]")
RATING_RANGE = (1.0, 10.0)
NAN = math.nan


def _own(pattern: re.Pattern, text: str, given: str) -> tuple[list[re.Match], bool]:
    """The matches of ``pattern`` in ``text`` whose exact text is not in ``given``; and whether any was left out."""
    found = list(pattern.finditer(text))
    own = [m for m in found if m.group(0) not in given]
    return own, len(own) < len(found)


def parse_rating(text: str, given: str = "") -> tuple[float, str | None]:
    """``(rating, None)`` or ``(NaN, reason)``; ``given``: what the judge was shown (see the module docstring)."""
    if not isinstance(text, str):
        return NAN, "the judge returned no text"
    given = given if isinstance(given, str) else ""
    own, quoted = _own(ONE_SCORE, text, given)
    if not own and not ONE_SCORE.search(text):
        own, quoted = _own(ONE_SCORE_BACKUP, text, given)
    if not own:
        return NAN, ("no [[rating]] of the judge's own: the only markers in its answer also appear in the judged "
                     "answer (read as quoted)" if quoted else "no [[rating]] in the judge's answer")
    values = {float(m.group(1)) for m in own}
    if len(values) > 1:
        return NAN, f"ambiguous: the judge's answer holds the ratings {', '.join(f'{v:g}' for v in sorted(values))}"
    value = values.pop()
    lo, hi = RATING_RANGE
    if not lo <= value <= hi:
        return NAN, f"rating {value:g} is outside the 1-10 scale"
    return value, None


_WINNERS = re.compile(r"\[\[([ABC])\]\]")


def parse_winner(text: str, given: str = "") -> str:
    """``A``, ``B``, ``tie`` or ``error`` (none of the judge's own, or its own disagree); ``given`` as above."""
    if not isinstance(text, str):
        return "error"
    own, _ = _own(_WINNERS, text, given if isinstance(given, str) else "")
    verdicts = {m.group(1) for m in own}
    if len(verdicts) != 1:
        return "error"
    return {"A": "A", "B": "B", "C": "tie"}[verdicts.pop()]


def game_score(g1: str, g2: str) -> tuple[float, str | None]:
    """One pairwise game as FastChat's ``show_result.py`` counts it, from the method's side: game 1 has the
    method as assistant A, game 2 (positions swapped) as B. Both must agree on a winner, else it is a tie.
    Returns 1 (win), 0.5 (tie), 0 (loss) — the mean is FastChat's ``win_rate_adjusted`` — or NaN with the
    reason when either verdict is unreadable (FastChat drops those games)."""
    if g1 == "error" or g2 == "error":
        return NAN, ("no [[A]]/[[B]]/[[C]] verdict of the judge's own (missing, only markers the answers also hold, "
                     "or several)" + (" (both orders)" if g1 == g2 else ""))
    first = {"A": "method", "B": "reference"}.get(g1, g1)
    second = {"A": "reference", "B": "method"}.get(g2, g2)
    if first == "tie" or first != second:
        return 0.5, None
    return (1.0 if first == "method" else 0.0), None
