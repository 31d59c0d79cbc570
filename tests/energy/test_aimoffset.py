"""Each polled trial's power corrected for its measured aim offset (harness/energy/aimoffset.py, issue 30.3):
on a setting that is no study row, the stated bound holds and informs where the aim's 1 ms poll inflated the
split-half difference (the known-truth checks are in test_polledbound.py)."""
from __future__ import annotations

from test_energy_study import STUDY  # the study module, loaded once (scripts/ is no package)

from harness.energy import make_energy_meter


def test_a_profiled_part_time_sensor_under_a_load_locked_to_it_states_a_bound_that_informs():
    """A 40 ms update with a 20 ms window (told by a sensor profile) under a 12.5 Hz square load (not a study
    row; the study's is 50/25 ms at 10 Hz, 23× at 1 × 6). Each trial opens up to a 1 ms poll off its aimed
    phase; the load's aliasing slope × those offsets put more into the even-against-odd split-half difference
    than into the estimate, and the bound stated 9.7× the error (1 × 10). Corrected in the estimate for each
    trial's measured offset × its slope against phase, the split-half of the corrected trials holds the rest:
    7.2×. The issue's 5× is out of reach in a cell this short (Student's t on ≤ 9 pooled measurements)."""
    variant = STUDY.Scenario("40/20 ms profiled, 12.5 Hz", "30.3 informs", (3, 8), ("polled",),
                             load="square:0.08:0.5", gpu={**STUDY.VOLTA, "power_update_s": 0.04,
                                                          "power_window_s": 0.02},
                             profile={"name": "p40", "power_window_s": 0.02})
    s = STUDY.summarize([STUDY.run_cell(make_energy_meter, variant, "polled", 0, 10)])
    assert s["bound_holds_all"] >= 0.95, s
    assert s["informs"] <= 8.0, s
