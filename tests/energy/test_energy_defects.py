"""Issue 13: each defect found on held-out simulated GPUs, reproduced on a simulated NVML in
virtual time, and what the meter must do instead. Accuracy only (no wall times); the cost
study is scripts/study_energy_accuracy.py."""
from __future__ import annotations

import math
import random
import statistics

import pynvml
import pytest

from harness.energy import make_energy_meter
from harness.energy.phases import largest_gap
from harness.energy.simloads import llm_like_load, prefill_then_decode, square_wave
from harness.energy.simulated import SimClock, SimGPU, SimulatedNVML

QUICK = {"idle_baseline_s": 0.5, "infer_update_period_s": 0.5}


def make(seed: int = 0, cfg: dict | None = None, **gpu_kwargs):
    clock = SimClock(500.0 + 0.731 * seed)
    rng = random.Random(seed)
    gpu_kwargs.setdefault("power_phase_s", rng.uniform(0, 0.1))
    gpu_kwargs.setdefault("counter_phase_s", rng.uniform(0, 0.1))
    gpu = SimGPU(clock, **gpu_kwargs)
    nvml = SimulatedNVML([gpu], clock)
    meter = make_energy_meter({**QUICK, **(cfg or {})}, [0], nvml=nvml, clock=clock)
    return clock, gpu, meter, rng


def measure(meter, gpu, pieces):
    m = meter.measure("p", lambda: gpu.run(pieces))
    return m, m.reading


def rel(estimate: float, truth: float) -> float:
    return (estimate - truth) / truth


# ---- 1. phase shifting with an inexactly known update period ------------------------------------

TEN_HZ = square_wave(0.1, 0.5, 420.0, 90.0, 3.0)  # a load periodic at 10 Hz, 3 s per run


@pytest.mark.parametrize("sensor_s, believed_s", [(0.1003, None), (0.1, 0.0996), (0.1, 0.1002)])
def test_phases_spread_without_knowing_the_period_to_a_millisecond(sensor_s, believed_s):
    """A 100.3 ms sensor (period inferred on a 1 ms grid), or an exact 100 ms sensor whose period is
    believed to be 99.6 or 100.2 ms, under a 10 Hz load: the old aiming (phases counted from the first
    trial) put every trial at nearly the same phase — 35 % mean / 45 % worst error while the trial
    spread looked tiny. Phases aimed from a refresh seen just before each trial stay spread."""
    errors = []
    for seed in range(4):
        cfg = {"source": "power"}
        if believed_s is not None:  # the period is taken from the profile, not inferred
            cfg.update(infer_update_period_s=0.0, gpu={"name": "test", "power_update_s": believed_s,
                                                       "power_window_s": 0.025})
        clock, gpu, meter, rng = make(seed, cfg, power_update_s=sensor_s)
        m, r = measure(meter, gpu, TEN_HZ)
        meter.close()
        errors.append(rel(r.energy_all_runs_j, sum(m.results)))
        assert r.phase_gap < 0.125 + 0.03  # 8 trials at evenly spaced phases
        assert r.phases_verified
        assert abs(errors[-1]) <= r.error_bound
    assert statistics.mean(map(abs, errors)) < 0.01 and max(map(abs, errors)) < 0.02


def test_uncertainty_does_not_shrink_when_phases_are_not_spread():
    """Without phase shifting (phase_shifts=1) every trial sees the 10 Hz load at whatever phase it
    opens: the trials agree with each other, yet the estimate is far off. The bound must say so."""
    for seed in range(3):
        clock, gpu, meter, rng = make(seed, {"source": "power", "phase_shifts": 1}, power_update_s=0.1003)
        m, r = measure(meter, gpu, TEN_HZ)
        meter.close()
        error = rel(r.energy_all_runs_j, sum(m.results))
        assert r.phases_verified is False
        assert abs(error) <= r.error_bound and r.error_bound > 1.0  # anything from idle to the power limit
        assert "aliasing" in r.error_basis


def test_phase_aiming_keeps_trials_apart_where_counting_from_the_first_trial_collapses():
    """The old rule, reproduced: phases counted from the first trial's opening with a period 0.3 ms
    short drift by elapsed/period × 0.3 ms; after the ~3 s trials of a 10 Hz load the intended quarter
    steps are eaten up. The meter's trials (aimed from fresh refreshes) keep their spacing."""
    true_p, believed = 0.1003, 0.1
    opens, elapsed = [0.0], 0.0
    for trial in range(1, 4):
        elapsed += 3.0 + 0.3  # a trial's runs and the delay before the next
        target = (trial / 4) * believed
        elapsed += (target - elapsed) % believed
        opens.append(elapsed)
    old_phases = [(t % true_p) / true_p for t in opens]
    assert largest_gap(old_phases) > 0.5  # the four "quarter" phases bunch together
    clock, gpu, meter, rng = make(1, {"source": "power", "phase_shifts": 4, "trials": 4}, power_update_s=true_p)
    _, r = measure(meter, gpu, TEN_HZ)
    meter.close()
    assert r.phase_gap < 0.25 + 0.03


# ---- 2. idle drifting through a cell --------------------------------------------------------------

@pytest.mark.parametrize("source", ["counter", "power"])
def test_net_energy_tracks_idle_drifting_between_60_and_90_watts(source):
    """Idle drifts 60→90→60 W over the cell (a thermal swing): one 5 s baseline at the start put net
    energy off by 21 % mean / 33 % worst. Idle measured after each prompt, interpolated, keeps it ~exact."""
    clock, gpu, meter, rng = make(3, {"source": source}, idle_w=75.0, idle_wave_w=15.0, idle_wave_period_s=90.0,
                                  idle_wave_phase=-math.pi / 2)
    errors = []
    for _ in range(8 if source == "counter" else 3):
        pieces = [(s, w - 75.0 + gpu.idle_power(clock.now())) for s, w in llm_like_load(rng, rng.uniform(1.0, 4.0))]
        m, r = measure(meter, gpu, pieces)
        errors.append(rel(r.net_energy_per_run_j, r.simulated_exact_net_energy_j))
        clock.sleep(rng.uniform(0.5, 3.0))  # the runner's own work between prompts
    meter.close()
    assert statistics.mean(map(abs, errors)) < 0.01 and max(map(abs, errors)) < 0.02


# ---- 3. edges ---------------------------------------------------------------------------------------

def test_one_second_averaged_power_draw_has_no_edge_bias():
    """Ada-like GPU polled through nvmlDeviceGetPowerUsage only (1 s running average): the idle
    following the last run leaked into the averaged readings (−1.0 to −1.8 %). Integrating the held
    readings over [a, b + W + 1.5 P] minus idle removes the bias."""
    errors = []
    for seed in range(4):
        cfg = {"source": "power-usage", "gpu": {"name": "l40", "architecture": "ada"}, "trials": 2}
        clock, gpu, meter, rng = make(seed, cfg, name="NVIDIA L40S", architecture=pynvml.NVML_DEVICE_ARCH_ADA,
                                      has_instant=False, usage_window_s=1.0)
        assert meter.primary.semantics.window_s == 1.0
        m, r = measure(meter, gpu, llm_like_load(rng, 6.0))
        meter.close()
        errors.append(rel(r.energy_all_runs_j, sum(m.results)))
        assert abs(errors[-1]) <= r.error_bound
    assert abs(statistics.mean(errors)) < 0.003 and max(map(abs, errors)) < 0.006


def test_counter_window_opening_on_a_prefill_plateau_is_exact():
    """A window opening on a 120 ms prefill plateau at 520 W: filling the edges with the window's mean
    power was −0.3 to −0.4 % off. Edges on observed refreshes with the GPU idle around them are exact."""
    for seed in range(4):
        clock, gpu, meter, rng = make(seed)
        m, r = measure(meter, gpu, prefill_then_decode(rng, rng.uniform(1.2, 3.0)))
        meter.close()
        assert r.mode == "counter-aligned" and r.repetitions == 1
        assert abs(rel(r.energy_per_run_j, m.results[0])) < 3e-4
        assert abs(rel(r.energy_per_run_j, m.results[0])) <= r.error_bound < 0.01


# ---- 4. samples, coverage, poll rate, missed refreshes ----------------------------------------------

def test_coverage_counts_sensor_refreshes_not_changed_values():
    """A clean 10 Hz wave locked to a 10 Hz sensor: every reading is the same, so counting changed
    values reported coverage 0.00 while the estimate was right. Refreshes are counted from the poll
    timing and the update period."""
    clock, gpu, meter, rng = make(0, {"source": "power", "trials": 1, "phase_shifts": 1}, ripple_w=0.0)
    _, r = measure(meter, gpu, square_wave(0.1, 0.5, 400.0, 100.0, 6.0))
    meter.close()
    assert r.coverage == pytest.approx(0.25, abs=0.01)
    assert r.samples == pytest.approx(r.measured_s / 0.1, abs=2)
    assert r.poll_hz == pytest.approx(50.0, rel=0.02) and r.missed_refreshes == 0


def test_a_starved_sampler_reports_its_poll_rate_and_missed_refreshes():
    """With the decoding thread holding the GIL the sampler fell to 15-28 Hz; on a 20 ms sensor
    (Volta) that misses refreshes. The reading says how fast it polled and what it missed."""
    cfg = {"source": "power", "trials": 1, "gpu": {"name": "v100", "architecture": "volta"}}
    clock, gpu, meter, rng = make(0, cfg, name="Tesla V100-SXM2-32GB", architecture=pynvml.NVML_DEVICE_ARCH_VOLTA,
                                  power_update_s=0.02, power_window_s=0.01)
    clock.stall(clock.now() + 100.0, 1 / 16)
    _, r = measure(meter, gpu, llm_like_load(rng, 6.0))
    meter.close()
    assert r.poll_hz == pytest.approx(16.0, rel=0.1)
    expected = r.measured_s / 0.02
    assert r.missed_refreshes == pytest.approx(expected * (1 - 0.02 * 16), rel=0.1)
    assert r.coverage == pytest.approx((expected - r.missed_refreshes) * 0.01 / r.measured_s, rel=0.05)


# ---- 5. naive: NaN, never 0 J -----------------------------------------------------------------------

def test_naive_window_without_a_sample_is_nan_with_reason_not_zero():
    naive = {"name": "naive", "source": "power-usage", "sample_hz": 1, "integration": "sum", "skip_unchanged": False,
             "align_timestamps": False, "protocol": False, "idle_baseline_s": 0.0, "infer_update_period_s": 0.0,
             "idle_every_s": None, "host": False}
    clock = SimClock(10.0)
    gpu = SimGPU(clock)
    meter = make_energy_meter(naive, [0], nvml=SimulatedNVML([gpu], clock), clock=clock)
    clock.sleep(0.2)  # between two 1 Hz samples
    m = meter.measure("short", lambda: gpu.run([(0.3, 300.0)]))
    assert math.isnan(m.reading.energy_per_run_j) and m.reading.energy_per_run_j != 0.0
    assert "no sample fell inside" in m.reading.reason
    clock.sleep(0.5)
    longer = meter.measure("long", lambda: gpu.run([(3.0, 300.0)])).reading
    assert longer.reason is None and longer.energy_per_run_j > 0
    meter.close()


# ---- 6. reading cost does not grow with the cell ----------------------------------------------------

def test_an_open_cell_window_keeps_bounded_history_and_stays_exact():
    """The open cell window kept every sample (≈1 ms per reading after a minute, 150 ms after two
    hours). Windows now hold cumulative values: the history stays bounded however long the cell."""
    clock = SimClock(0.0)
    gpu = SimGPU(clock, ripple_w=0.0)
    meter = make_energy_meter({**QUICK, "protocol": False, "sample_hz": 10, "keep_samples_s": 5.0}, [0],
                              nvml=SimulatedNVML([gpu], clock), clock=clock)
    start = clock.now()
    cell = meter.start_window("cell")
    retained = []
    for minute in range(60):
        m = meter.measure("prompt", lambda: gpu.run([(2.0, 300.0)]))
        assert abs(rel(m.reading.energy_per_run_j, m.results[0])) < 0.01
        clock.sleep(58.0)
        retained.append(meter.sampler.retained())
    end = clock.now()
    reading = meter.stop_window(cell)
    assert max(retained) <= 4 * 5.0 * 10 and retained[-1] <= retained[0] + 10  # ~keep_s × rate × series
    assert rel(reading.energy_per_run_j, gpu.energy(reading.duration_s + start) - gpu.energy(start)) == pytest.approx(0, abs=1e-3)
    assert end - start > 3600
    meter.close()


# ---- 7. the whole path on a simulated GPU: tests/energy/test_energy_platform.py (CLI) --------------------

# ---- 8. cost: one run per prompt with a counter ----------------------------------------------------

def test_counter_measures_generations_of_a_second_or_more_once():
    """With 6-12 s generations the protocol ran each prompt 8 times to measure 4; with an energy
    counter a generation is measured once whenever its expected bound allows (edges on refreshes)."""
    clock, gpu, meter, rng = make(5)
    errors = []
    for seconds in (1.0, 1.7, 6.0, 12.0):
        calls = []
        m = meter.measure("p", lambda: calls.append(1) or gpu.run(llm_like_load(rng, seconds)))
        assert len(calls) == 1 and m.repetitions == 1 and m.reading.trials == 1
        errors.append(rel(m.reading.energy_per_run_j, m.result))
        assert abs(errors[-1]) <= m.reading.error_bound < 0.005
    short_calls = []
    m = meter.measure("short", lambda: short_calls.append(1) or gpu.run(llm_like_load(rng, 0.05)))
    assert len(short_calls) > 1 and m.repetitions == len(short_calls)  # a window too short for its bound is repeated
    meter.close()
    assert max(map(abs, errors)) < 0.002


# ---- item 4: both sources, cross-checked -------------------------------------------------------------

def test_counter_and_polled_energy_are_cross_checked():
    clock, gpu, meter, rng = make(2)
    good = measure(meter, gpu, llm_like_load(rng, 8.0))[1]
    assert math.isfinite(good.polled_energy_j) and abs(good.cross_check_diff) < 0.05 and good.cross_check_flag is False
    meter.close()
    # a driver whose counter under-reads by 10 % (a known NVML failure on some drivers)
    clock, gpu, meter, rng = make(2)
    gpu.counter_resolution_j = 0.001
    real = gpu.counter_mj
    gpu.counter_mj = lambda t: 10**9 + round((real(t) - 10**9) * 0.9)
    bad = measure(meter, gpu, llm_like_load(rng, 8.0))[1]
    meter.close()
    assert bad.cross_check_flag is True and bad.cross_check_diff == pytest.approx(1 / 0.9 - 1, abs=0.03)


# ---- item 3: every record states an honest bound ----------------------------------------------------

@pytest.mark.parametrize("source", ["counter", "power"])
def test_every_reading_states_a_bound_that_holds(source):
    clock, gpu, meter, rng = make(9, {"source": source})
    for seconds in (0.4, 2.5):
        m, r = measure(meter, gpu, llm_like_load(rng, seconds))
        assert r.error_basis and math.isfinite(r.error_bound)
        assert abs(rel(r.energy_all_runs_j, sum(m.results))) <= r.error_bound
    meter.close()


def test_measurement_is_one_object():
    clock, gpu, meter, rng = make(0, {"source": "counter", "min_window_s": 1.0, "target_bound": 1e-4})
    m = meter.measure("p", lambda: gpu.run([(0.25, 300.0)]))
    assert m.repetitions == len(m.results) == m.reading.repetitions > 1 and m.result is m.results[0]
    record = m.as_record(lambda joules: 10)
    assert record["energy.tokens_all_runs"] == 10 * m.repetitions
    assert record["energy.j_per_token"] == pytest.approx(m.reading.energy_all_runs_j / (10 * m.repetitions))
    with pytest.raises(TypeError):  # the former (results, reading) tuple is gone (issue 21.8)
        results, reading = m
    meter.close()


def test_net_energy_states_its_own_bound():
    clock, gpu, meter, rng = make(4, {"source": "counter"}, idle_w=75.0, idle_wave_w=15.0, idle_wave_period_s=90.0)
    for _ in range(5):
        pieces = [(s, w - 75.0 + gpu.idle_power(clock.now())) for s, w in llm_like_load(rng, rng.uniform(1.0, 3.0))]
        _, r = measure(meter, gpu, pieces)
        assert math.isfinite(r.net_error_bound) and r.net_error_bound >= r.error_bound
        assert abs(rel(r.net_energy_per_run_j, r.simulated_exact_net_energy_j)) <= r.net_error_bound
    meter.close()
