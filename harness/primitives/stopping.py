"""When a generation ends: EOS or a stop string, checked inside every decoder's loop (issue 14 item 3).

A decoder asks :meth:`StopCondition.cut` after each block of tokens it commits (one token for AR,
the accepted path + one token for a speculative round): if the block completes a stop string or
holds EOS, the block is cut just after that token and the loop ends, so the tokens generated,
timed and counted are the ones the user gets (the stop string included, as HF ``generate``'s
``stop_strings`` keeps it; the task's ``truncate`` then cuts the text before it). Beam decoders
ask :meth:`StopCondition.rows_stopped` which of their beams' texts hold a stop string (such a beam
is finished, like one that produced EOS).

Checked in the loop by: the speculative loop (``sd``, ``specinfer``, ``spectr``, ``mcsd*``, ``mtad``,
``bild``, ``typical``), ``ar_greedy``/``ar_sampling``, ``beam_search``, ``beam_sampling``, ``mtjd``,
``hf_assisted`` (a stopping criterion after each round) and ``dsbd`` (after each iteration a beam that
completes a stop string is finished and its length cut there; the iteration's statistics still count
the whole iteration, as its forest was drafted and verified). The base decoder trims every output once
more, so the text is right for every method.

Stop strings are matched on the decoded text of the generated tokens (prompt excluded), so a stop
string split across tokens is found. Each check decodes the output once (a few µs per hundred tokens
with a fast tokenizer); without stop strings it is one ``in`` test per block.
"""
from __future__ import annotations

from dataclasses import dataclass, field
from typing import Callable, Sequence


@dataclass
class StopCondition:
    """EOS id (None: no EOS) and stop strings (matched on ``decode(generated ids)``).

    One object per generation: it remembers how much of the text it has already searched.
    """

    eos_token_id: int | None = None
    stop_strings: tuple[str, ...] = ()
    decode: Callable[[Sequence[int]], str] | None = None
    _searched: int = field(default=0, repr=False)  # chars of text already free of any stop string

    def __post_init__(self):
        self.stop_strings = tuple(s for s in self.stop_strings if s)
        if self.stop_strings and self.decode is None:
            raise ValueError("stop strings need a decode function (the tokenizer's)")

    @classmethod
    def of(cls, stop) -> StopCondition:
        """A StopCondition as given, or the EOS-only one for an EOS id (or None)."""
        return stop if isinstance(stop, StopCondition) else cls(eos_token_id=stop)

    def _stop_in(self, text: str, start: int) -> bool:
        return any(text.find(s, start) >= 0 for s in self.stop_strings)

    def cut(self, out: Sequence[int], block: Sequence[int]) -> int | None:
        """Tokens of ``block`` (committed after ``out``) to keep when the generation ends in it, else None.

        The block ends at its first EOS; a stop string completed by block token k ends it after k.
        """
        end = None
        if self.eos_token_id is not None and self.eos_token_id in block:
            end = list(block).index(self.eos_token_id) + 1
        if not self.stop_strings:
            return end
        longest = max(len(s) for s in self.stop_strings)
        start = max(0, self._searched - longest + 1)
        candidate = list(out) + list(block[:end] if end is not None else block)
        text = self.decode(candidate)
        if not self._stop_in(text, start):
            if end is None:
                self._searched = len(text)
            return end
        for k in range(1, len(candidate) - len(out) + 1):  # the first block token that completes a stop string
            if self._stop_in(self.decode(list(out) + list(block[:k])), start):
                return k
        return end  # pragma: no cover — the full candidate holds one

    def rows_stopped(self, rows: Sequence[Sequence[int]]) -> list[bool]:
        """Which rows' (beams') generated texts hold a stop string (EOS is the beam decoder's own check)."""
        if not self.stop_strings:
            return [False] * len(rows)
        return [self._stop_in(self.decode(list(r)), 0) for r in rows]

    def trim(self, tokens: Sequence[int]) -> tuple[list[int], bool]:
        """``tokens`` cut after the first stop string / EOS, and whether a stop string cut them."""
        fresh = StopCondition(self.eos_token_id, self.stop_strings, self.decode)
        k = fresh.cut([], tokens)
        if k is None:
            return list(tokens), False
        eos_end = (list(tokens).index(self.eos_token_id) + 1 if self.eos_token_id is not None
                   and self.eos_token_id in tokens else None)
        return list(tokens[:k]), bool(self.stop_strings) and k != eos_end
