"""DSBD's rounds as the device verification reports them (issue 28 item 2): each round's committed tokens, read
with the round's one summary, are its first output beam's new tokens, and widths wider than the draft (W_min >
W_S) pad the frontier without breaking the iteration."""
import pytest
import torch

from harness.decoders.dsbd import DSBD
from harness.methods import build_decoder
from harness.primitives.stopping import StopCondition
from harness.testing import toy_pair

CONFIGS = [dict(), dict(width=3, draft_width=5), dict(memory_constrained=True, threshold=0.5),
           dict(gamma=1, draft_width=2), dict(min_width=6, draft_width=3), dict(width=4, draft_width=2, gamma=2)]


@pytest.mark.parametrize("params", CONFIGS)
def test_round_tokens_are_the_first_output_beams(monkeypatch, params):
    seen = []
    advance = DSBD._advance

    def recording(self, *args):
        new = advance(self, *args)
        seen.append(tuple(new.tokens[0, -args[-1]:].tolist()))  # args[-1]: the round's steps
        return new

    monkeypatch.setattr(DSBD, "_advance", recording)
    pair = toy_pair(vocab_size=6, eos_token_id=2)
    dec = build_decoder("dsbd", pair, **params)
    for seed in range(3):
        seen.clear()
        _, extras, rounds = dec._run(torch.tensor([[1, 3, 4]]), 14, torch.Generator().manual_seed(seed),
                                     StopCondition())
        assert [r.committed for r in rounds] == seen
        assert extras.avg_width >= min(params.get("min_width", 1), params.get("width") or 1)
