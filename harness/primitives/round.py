"""One speculative round's result, the one type every round driver returns, a γ policy observes and
:meth:`~harness.stats.GenerationStats.observe_round` records."""
from __future__ import annotations

from dataclasses import dataclass, replace

NAN = float("nan")


@dataclass(frozen=True)
class Round:
    """One finished draft→verify round (MTJD: one joint step; DSBD: one iteration).

    ``committed`` the token ids the round committed (the accepted drafts and the target's token),
    ``gamma`` γ_r, the depth drafted (chain length; tree depth; 0 = one plain target step),
    ``accepted`` the draft tokens committed on the accepted path, ``draft_nodes`` every token the draft
    proposed, and the host time of drafting and of verification (NaN where not measured).
    """

    committed: tuple[int, ...]
    gamma: int
    accepted: int
    draft_nodes: int
    draft_time_s: float = NAN
    verify_time_s: float = NAN

    def cut(self, end: int) -> Round:
        """The round as recorded when the output ends after its first ``end`` tokens (EOS or a stop
        string): the kept tokens are its accepted drafts + one, as every round's are."""
        return replace(self, committed=self.committed[:end], accepted=min(self.accepted, end - 1))
