"""The device verification of a DSBD forest stays cheap on the host (issue 28 item 2, "on CPU no regression"): the
torch calls one round's verification makes are counted (a deterministic proxy for its CPU time, no clock), and held
to a budget that the first device version (every layer padded and merged into the kept outcome one by one:
859 calls per round here) exceeds."""
from torch.overrides import TorchFunctionMode

from harness.decoders.dsbd import DSBD
from harness.methods import build_decoder
from harness.testing import near_pair

BUDGET = 760  # torch calls per round's verification, γ = 3 layers of W_S = 4 drafts and the extra layer (713 now:
#               a fill-up's one-token draw is 7 cheap calls instead of multinomial's one, harness.primitives.sampling)


class _Calls(TorchFunctionMode):
    """Top-level torch calls (a call made inside another counts once)."""

    def __init__(self):
        super().__init__()
        self.total, self._depth = 0, 0

    def __torch_function__(self, func, types, args=(), kwargs=None):
        self.total += self._depth == 0
        self._depth += 1
        try:
            return func(*args, **(kwargs or {}))
        finally:
            self._depth -= 1


def test_a_rounds_verification_stays_within_its_torch_call_budget(monkeypatch):
    verify, rounds, calls = DSBD._verify, [], []

    def counted(self, *args):
        with _Calls() as c:
            out = verify(self, *args)
        calls.append(c.total)
        rounds.append(len(args[1].layers))
        return out

    monkeypatch.setattr(DSBD, "_verify", counted)
    dec = build_decoder("dsbd", near_pair(vocab_size=16))
    for seed in range(4):
        dec.generate([1, 2, 3, 4, 5], 24, seed=seed)
    full = [c for c, layers in zip(calls, rounds) if layers == dec.params.gamma]
    assert full and sum(full) / len(full) <= BUDGET, (sum(full) / len(full), BUDGET)
