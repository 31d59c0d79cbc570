"""mcsd Fig. 7's data at the source: every round's decision-model predictions are recorded
(``stat.decision_predictions``: per round, the largest predicted acceptance over the sequences at each check), so
that the analysis can set them against the verification's outcome (the round's accept length) — one list per
round, one number per check, in the order drafting asked."""
from __future__ import annotations

import pytest

from harness.methods import build_decoder


@pytest.mark.parametrize("method,params", [("mcsd_target_init", {"k_config": (16, 1, 1, 1, 1, 1)}),
                                           ("mcsd_dynamic", {"num_drafts": 8, "gamma": 5})])
def test_each_round_records_its_checks_predictions(tiny_pair, heldout_prompts, method, params):
    """β 0.75 (above the T1 model's median prediction) stops some rounds: a round that stopped at depth d has d
    checks, the last below β; a round drafted to its depth g (D, or less where max_new_tokens ends it) has g − 1
    checks, none below β; the stop count agrees."""
    dec = build_decoder(method, tiny_pair, temperature=1.0, top_k=0, top_p=1.0, decision_model="t1",
                        decision_threshold=0.75, **params)
    depth, stopped, full = 5, 0, 0
    # generations until both kinds of round were seen (seeded trajectories move with the walk's draws: same law)
    for seed, ids in ((seed, ids) for seed in (1, 2, 3) for ids in heldout_prompts[:4]):
        if stopped and full:
            break
        st = dec.generate(ids, 40, seed=seed).stats
        preds = st.extras.decision_predictions
        assert len(preds) == st.rounds == len(st.round_gammas)
        assert st.extras.decision_lookahead == 0  # T1 judges the token just drafted
        assert sum(map(len, preds)) == st.extras.decision_checks
        for p, g in zip(preds, st.round_gammas):
            assert all(0.0 <= x <= 1.0 for x in p)
            if len(p) == g:  # stopped after turn g
                assert g < depth and p[-1] < 0.75 and all(x >= 0.75 for x in p[:-1])
                stopped += 1
            else:
                assert len(p) == g - 1 and all(x >= 0.75 for x in p)  # full (D, or what max_new_tokens left)
                full += 1
        assert sum(len(p) == g for p, g in zip(preds, st.round_gammas)) == st.extras.early_stops
        rec = st.extras_record()
        assert rec["stat.decision_predictions"] == preds and rec["stat.decision_lookahead"] == 0
    assert stopped > 0 and full > 0


def test_no_decision_model_records_no_predictions(tiny_pair, heldout_prompts):
    dec = build_decoder("mcsd_target_init", tiny_pair, temperature=1.0, top_k=0, top_p=1.0, k_config=(4, 1, 1))
    st = dec.generate(heldout_prompts[0], 20, seed=0).stats
    assert st.extras.decision_predictions == [] and st.extras.decision_lookahead is None
