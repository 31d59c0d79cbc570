"""Issue 30 item 1, one estimator per concept: ``harness-gpu-check``'s sensor characterisation
(harness/energy/characterize.py) and the run's start-up self-check (harness/energy/selfcheck.py) measure a
power reading's averaging window and lag with the same fit (``characterize.fit_window``). Simulated NVML in
virtual time (no wall-clock assertions)."""
from __future__ import annotations

import pytest

from harness.energy import characterize, selfcheck
from harness.energy.simulated import SimClock, SimGPU, SimulatedNVML
from harness.energy.sources import open_sources


def _figures(quick: bool = True, **gpu) -> dict:
    clock = SimClock(100.0)
    sim = SimGPU(clock, hysteresis_w=25.0, hysteresis_s=1.0, **gpu)  # as harness-gpu-check's simulated device
    sources = open_sources([0], "auto", SimulatedNVML([sim], clock), by_index=True)
    figures = characterize.characterize_sources(sources, lambda s: sim.run([(s, 300.0)]), clock, quick=quick)
    sources.close()
    return figures


def test_the_self_check_and_gpu_check_share_one_window_estimator():
    assert selfcheck.fit_window is characterize.fit_window
    assert not hasattr(characterize, "averaging_window")


@pytest.mark.parametrize("window,update", [(0.025, 0.1), (0.117, 0.1), (0.05, 0.02), (1.0, 0.1)])
def test_gpu_check_measures_window_and_lag_of_a_power_reading_from_its_steps(window, update):
    """The previous estimator ((refresh - edge) ÷ busy fraction, lag taken as 0) needed two readings
    part-way through an edge: a part-time 25 ms window on 100 ms updates met one in --quick's ten
    0.4 s steps (rising and falling edges at the same phase) and was only "inferred" from the table; the
    reading's lag was never measured. Now: window and lag from one fit, each with its 95 % range."""
    figures = _figures(power_window_s=window, power_update_s=update)
    w, lag = figures["nvml-power-instant averaging window"], figures["nvml-power-instant lag"]
    assert w.status == "measured" and w.value == pytest.approx(window, rel=0.1), w
    assert lag.status == "measured" and lag.value <= 0.01, lag  # the simulator's power readings have no lag
    lo, hi = (float(x) / 1e3 for x in w.how.split("95 % ")[1].split(" ms")[0].split(".."))
    assert lo - 0.0015 <= window <= hi + 0.0015, w.how
    profile = characterize.sensor_profile(figures, ["nvml-power-instant"])["nvml-power-instant"]
    assert profile["window_s"]["value"] == w.value and profile["lag_s"]["value"] == lag.value
