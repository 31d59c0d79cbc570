"""Where time and energy go (issue 13 item 6): prefill vs decode, draft vs verification vs the rest."""
import math

import pytest

from harness.methods import build_decoder
from harness.energy.attribution import Attribution
from harness.results.record import BREAKDOWN_ENERGY, energy_breakdown, summarize_cell
from harness.stats import pooled_totals
from harness.testing import toy_pair


@pytest.mark.parametrize("method", ["sd", "ar", "specinfer"])
def test_time_splits_add_up(method):
    dec = build_decoder(method, toy_pair(vocab_size=7), decoding="sampling")
    st = dec.generate([1, 2, 3], 12, seed=0).stats
    assert 0 < st.prefill_time_s < st.wall_time_s
    assert st.decode_time_s == pytest.approx(st.wall_time_s - st.prefill_time_s)
    assert len(st.spans["target"]) == st.target_calls and len(st.spans.get("draft", [])) == st.draft_calls
    (a, b), = st.spans["generation"]
    assert all(a <= s <= e <= b for calls in st.spans.values() for s, e in calls)
    rec = st.as_record()
    for key in ("prefill_time_s", "decode_time_s", "rest_time_s"):
        assert key in rec
    if st.rounds:
        assert 0 <= st.rest_time_s == pytest.approx(st.wall_time_s - st.draft_time_s - st.verify_time_s)
    else:
        assert math.isnan(st.rest_time_s)
    totals = pooled_totals([rec, rec])
    assert totals["prefill_time_s"] == pytest.approx(2 * st.prefill_time_s)


def test_hf_assisted_has_no_prefill_split():
    st = build_decoder("hf_assisted", toy_pair(vocab_size=7), decoding="greedy").generate([1, 2], 6).stats
    assert math.isnan(st.prefill_time_s) and math.isnan(st.decode_time_s)


def _constant_power(powers):
    """A fake meter.attribute: each label draws its constant power; 'other' draws powers['other']."""
    def attribute(a, b, labels):
        seconds = {k: sum(min(e, b) - max(s, a) for s, e in v) for k, v in labels.items()}
        seconds["other"] = (b - a) - sum(seconds.values())
        return Attribution({k: powers[k] * t for k, t in seconds.items()}, dict(powers), seconds, 10, 0.0)
    return attribute


def test_energy_breakdown_splits_by_forward_calls():
    st = build_decoder("sd", toy_pair(vocab_size=7), decoding="sampling").generate([1, 2, 3], 12, seed=0).stats
    fields = energy_breakdown(_constant_power({"prefill": 300.0, "draft": 100.0, "verify": 200.0, "other": 50.0}),
                              st, enabled=True)
    draft_s = sum(e - s for s, e in st.spans["draft"])
    assert fields["energy.draft_j"] == pytest.approx(100.0 * draft_s)
    assert fields["energy.prefill_j"] == pytest.approx(300.0 * st.prefill_time_s)
    assert fields["energy.decode_j"] == pytest.approx(50.0 * st.decode_time_s)
    assert fields["energy.breakdown_reason"] is None
    cell = summarize_cell([fields, fields])
    assert cell["energy.draft_j"] == pytest.approx(2 * fields["energy.draft_j"])


def test_energy_breakdown_is_nan_with_the_reason_when_off_or_unmeasurable():
    st = build_decoder("sd", toy_pair(vocab_size=7)).generate([1, 2], 5, seed=0).stats
    off = energy_breakdown(_constant_power({}), st, enabled=False)
    assert all(math.isnan(off[f"energy.{k}"]) for k in BREAKDOWN_ENERGY)
    assert off["energy.breakdown_reason"] == "runner.breakdown=false"
    from harness.energy.meter import NullMeter
    on = energy_breakdown(NullMeter("no GPU").attribute, st, enabled=True)
    assert math.isnan(on["energy.draft_j"]) and "counter" in on["energy.breakdown_reason"]
    assert math.isnan(summarize_cell([on])["energy.draft_j"])
