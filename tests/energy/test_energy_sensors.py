"""Issue 30: energy from what the sensor is — semantics per reading × device × driver (measured, with
provenance), lag on every counter, bounds that inform, per-device facts, net beside gross. Simulated
NVML in virtual time (no wall-clock assertions)."""
from __future__ import annotations

import json
import math
import random
import statistics

import pynvml
import pytest

from harness.energy import make_energy_meter
from harness.energy.hardware import power_semantics, unevenness
from harness.energy.simloads import llm_like_load
from harness.energy.simulated import SimClock, SimGPU, SimulatedNVML

QUICK = {"idle_baseline_s": 0.5, "infer_update_period_s": 0.5, "host": False}
# an H200 as measured (issue 30): instant ~117 ms window on a 100 ms update; power.draw a 1 s running average
H200 = {"name": "NVIDIA H200", "architecture": pynvml.NVML_DEVICE_ARCH_HOPPER, "power_window_s": 0.117,
        "usage_window_s": 1.0, "idle_w": 75.0}


def make(seed: int = 0, cfg: dict | None = None, gpus: list[dict] | None = None, **gpu_kwargs):
    clock = SimClock(500.0 + 0.731 * seed)
    rng = random.Random(seed)
    devices = []
    for i, extra in enumerate(gpus or [{}]):
        kwargs = {"power_phase_s": rng.uniform(0, 0.1), "counter_phase_s": rng.uniform(0, 0.1),
                  "uuid": f"GPU-sim-{i}", **gpu_kwargs, **extra}
        devices.append(SimGPU(clock, **kwargs))
    nvml = SimulatedNVML(devices, clock)
    meter = make_energy_meter({**QUICK, **(cfg or {})}, list(range(len(devices))), nvml=nvml, clock=clock)
    return clock, devices, meter, rng


def run_all(devices, pieces):
    """Every device runs ``pieces`` at once (a tensor-parallel step); the exact energy of all of them."""
    clock = devices[0].clock
    start = clock.now()
    for gpu in devices:
        gpu.schedule(pieces)
    clock.sleep(sum(s for s, _ in pieces))
    return sum(g.energy(clock.now()) - g.energy(start) for g in devices)


def rel(estimate: float, truth: float) -> float:
    return (estimate - truth) / truth


# ---- 1. semantics per reading, device and driver -------------------------------------------------

def test_hopper_readings_have_their_own_semantics_with_provenance():
    usage = power_semantics("hopper", "NVIDIA H200", "usage")
    instant = power_semantics("hopper", "NVIDIA H200", "instant")
    assert (usage.update_s, usage.window_s) == (0.1, 1.0) and "NVML" in usage.provenance
    assert instant.window_s == pytest.approx(0.117) and instant.provenance.startswith("measured on")
    assert power_semantics("hopper", "NVIDIA H200", "smi") == usage
    assert "assumed" in power_semantics("ampere", "NVIDIA A100-SXM4-80GB", "instant").provenance
    assert unevenness(1.0, 0.1) == pytest.approx(0.0) and unevenness(0.025, 0.1) == pytest.approx(0.75)
    assert 0.05 < unevenness(0.117, 0.1) < 0.15


@pytest.mark.parametrize("source, load", [("power-usage", "llm"), ("power", "llm"), ("power", "10 Hz")])
def test_polled_h200_readings_hold_their_bound(source, load):
    """power.draw on an H200 is a 1 s running average: taken as 25 ms of every 100 ms, the polled path
    was −3.8 to −5.7 % off with its bound held on 0 of 52 prompts; it needs one trial. The instant
    field (117 ms on 100 ms) sees all of the run but each update's last 17 ms twice: under a 10 Hz load
    one trial was 6-9 % off; phase-shifted trials average that out."""
    from harness.energy.simloads import square_wave

    errors, bounds = [], []
    for seed in range(3):
        clock, (gpu,), meter, rng = make(seed, {"source": source}, **H200)
        for _ in range(2):
            pieces = llm_like_load(rng, rng.uniform(1, 3)) if load == "llm" else \
                [(rng.uniform(0, 0.1), 110.0)] + square_wave(0.1, 0.5, 420.0, 100.0, 3.0)
            m = meter.measure("p", lambda: gpu.run(pieces))
            errors.append(abs(rel(m.reading.energy_all_runs_j, sum(m.results))))
            bounds.append(m.reading.error_bound)
            assert errors[-1] <= m.reading.error_bound, (errors[-1], m.reading.error_basis)
            assert m.reading.trials == (1 if source == "power-usage" else 8)
        meter.close()
    assert statistics.mean(errors) < 0.005 and statistics.median(bounds) < 0.02


def test_a_run_says_which_figures_are_assumed_and_from_where():
    clock, (gpu,), meter, rng = make(0, {"source": "power-usage"}, **H200)
    m = meter.measure("p", lambda: gpu.run([(1.0, 300.0)]))
    meter.close()
    text = m.reading.sensor_semantics
    assert "nvml-power-usage" in text and "window 1000 ms" in text and "NVML" in text
    assert "measured at start" in text  # the update period was inferred here


def test_a_measured_sensor_profile_is_loaded_per_device_and_driver(tmp_path, monkeypatch):
    """harness-gpu-check writes one profile per device (uuid, driver, date); a later run loads it and
    says the figure was measured there; a profile of another driver is not used, and the run says so."""
    from harness.energy import profiles

    monkeypatch.setenv(profiles.ENV, str(tmp_path))
    device = {"name": "NVIDIA H200", "uuid": "GPU-sim-0", "driver": "550.54.15"}
    profiles.save(profiles.profile_from_figures(device, {"nvml-power-instant": {
        "update_s": {"value": 0.1, "how": "measured"}, "window_s": {"value": 0.117, "how": "measured"},
        "lag_s": {"value": None}}}, date="2026-11-27"))
    clock, (gpu,), meter, rng = make(0, {"source": "power"}, **{**H200, "name": "NVIDIA H200 (renamed)"})
    sem = meter.primary.semantics
    assert sem.window_s == pytest.approx(0.117) and "GPU-sim-0" in sem.provenance and "550.54.15" in sem.provenance
    assert "2026-11-27" in sem.provenance
    meter.close()
    saved = json.loads((tmp_path / "GPU-sim-0.json").read_text())
    saved["device"]["driver"] = "535.00"
    (tmp_path / "GPU-sim-0.json").write_text(json.dumps(saved))
    clock, (gpu,), meter, rng = make(0, {"source": "power"}, **H200)
    assert "not used" in " ".join(meter.state.profile_notes)
    assert "measured on NVIDIA H200 GPU-sim-0" not in meter.primary.semantics.provenance
    meter.close()


# ---- 2. lag on every counter, coarse ones too -------------------------------------------------------

def test_a_coarse_counters_lag_is_measured_and_corrected():
    """1 J steps published 100 ms late: the coarse path skipped the lag tests (−1.7 % mean, bound held
    on 1 of 20)."""
    errors, held = [], 0
    for seed in range(4):
        clock, (gpu,), meter, rng = make(seed, {"source": "counter"}, counter_resolution_j=1.0, counter_lag_s=0.1)
        for _ in range(3):
            m = meter.measure("p", lambda: gpu.run(llm_like_load(rng, rng.uniform(1, 4))))
            errors.append(rel(m.reading.energy_all_runs_j, sum(m.results)))
            held += abs(errors[-1]) <= m.reading.error_bound
        lag = m.reading.counter_lag_s  # a point figure only where the meter's tests bracketed it
        assert math.isnan(lag) or 0.07 <= lag <= 0.13, lag
        assert "lag" in m.reading.sensor_semantics
        meter.close()
    assert abs(statistics.mean(errors)) < 0.005 and held >= 0.9 * len(errors)


# ---- 7. the tools -----------------------------------------------------------------------------------

def _preset(name: str) -> dict:
    from omegaconf import OmegaConf

    from harness.resources import conf_dir

    return OmegaConf.to_container(OmegaConf.load(conf_dir() / "gpu" / f"{name}.yaml"))


def test_selecting_a_simulated_gpu_selects_the_simulated_source():
    """`harness method=sd gpu=sim_h100` on a CPU wrote no energy ("this cell ran on the CPU") while the
    cell was labelled sim_h100."""
    from harness.energy.meter import GpuEnergyMeter
    from harness.errors import ConfigError

    meter = make_energy_meter({**QUICK, "gpu": _preset("sim_h100")}, [], clock=SimClock(0.0))
    assert isinstance(meter, GpuEnergyMeter) and meter.state.exact is not None
    meter.close()
    with pytest.raises(ConfigError, match="simulated GPU.*energy.source=auto"):
        make_energy_meter({**QUICK, "source": "counter", "gpu": _preset("sim_h100")}, [], clock=SimClock(0.0))


# ---- 6. net beside gross ----------------------------------------------------------------------------

def _record(total: float, net: float, tokens: int, bound: float = 0.01, net_bound: float | None = 0.05) -> dict:
    from harness.energy.reading import EnergyReading

    r = EnergyReading(source="nvml-counter", energy_per_run_j=total, net_energy_per_run_j=net, energy_all_runs_j=total,
                      measured_s=1.0, error_bound=bound, net_error_bound=math.nan if net_bound is None else net_bound,
                      idle_power_w=70.0, coverage=1.0)
    return r.as_record(tokens)


def test_a_cell_summary_carries_net_its_bound_and_the_idle_dominated_flag():
    from harness.energy.reading import summarize_records

    busy = summarize_records([_record(100.0, 60.0, 10), _record(200.0, 100.0, 20, net_bound=0.02)])
    assert busy["energy.net_j_per_token"] == pytest.approx(160 / 30) and busy["energy.idle_dominated"] is False
    assert busy["energy.net_error_bound"] == pytest.approx((0.05 * 60 + 0.02 * 100) / 160)
    assert busy["energy.max_net_error_bound"] == 0.05 and busy["energy.net_share"] == pytest.approx(160 / 300)
    idle = summarize_records([_record(100.0, 0.17, 10)])  # the tiny pair on the H200: net 0.17 % of gross
    assert idle["energy.idle_dominated"] is True and "idle-dominated" in idle["energy.net_reason"]
    unknown = summarize_records([_record(100.0, 50.0, 10, net_bound=None)])
    assert math.isnan(unknown["energy.net_error_bound"]) and unknown["energy.net_reason"]


def test_null_breakdown_fields_in_a_cell_summary_carry_a_reason():
    from harness.results.record import summarize_cell

    ar = {"energy.prefill_j": 1.0, "energy.decode_j": 2.0, "energy.draft_j": math.nan, "energy.verify_j": math.nan,
          "energy.rest_j": math.nan, "energy.breakdown_reason": None}
    out = summarize_cell([ar])
    assert math.isnan(out["energy.draft_j"]) and "no draft" in out["energy.breakdown_reason"]
    off = {**ar, "energy.prefill_j": math.nan, "energy.breakdown_reason": "runner.breakdown=false"}
    assert "runner.breakdown=false" in summarize_cell([off])["energy.breakdown_reason"]


def test_the_report_puts_net_beside_gross_in_ratios_columns_and_fronts(tmp_path):
    """The real H200 (7B-shaped pair): AR 7.50 J/token gross / 1.68 net, sd 8.92 / 0.79 — gross and net
    point opposite ways; a tiny cell at net 0.2 % of gross is idle-dominated."""
    import sys
    from pathlib import Path

    sys.path.insert(0, str(Path(__file__).parent.parent))
    from synth_results import write_cell

    from harness.report import build_report

    res = tmp_path / "results"
    for cid, method, gross, net in (("ar", "ar_sampling", 7.50, 1.68), ("sd", "sd", 8.92, 0.79),
                                    ("tiny", "typical", 5.0, 0.0085)):
        write_cell(res, cid, method, prompts=8, jpt=gross, metrics={"score": 1.0},
                   record_extra=lambda i, net=net: {"energy.net_j_per_token": net * (1 + 0.01 * i)})
    out = build_report(res, tmp_path / "report", n_resamples=100)
    r = out["ratios"].set_index(["label", "category"])
    assert r.loc[("sd", "overall"), "energy_ratio"] > 1 > r.loc[("sd", "overall"), "net_energy_ratio"]
    summary = out["summary"].set_index("label")
    assert summary.loc["sd", "net_j_per_token"] == pytest.approx(0.79 * 1.035, rel=0.01)
    # sd: net 8.9 % of gross (idle-dominated too); AR: 22 %
    assert list(summary.loc[["typical", "sd", "ar_sampling"], "idle_dominated"]) == [True, True, False]
    md = out["md"].read_text()
    assert "net J/token ratio" in md and "net J/token" in md and "idle-dominated" in md.lower()


# ---- 4. per-device facts on multi-GPU cells ------------------------------------------------------------

@pytest.mark.parametrize("second", [{"counter_lag_s": 0.05}, {"counter_update_s": 0.02, "counter_lag_s": 0.02}],
                         ids=["second lags 50 ms", "second 20 ms update, 20 ms lag"])
def test_every_device_has_its_own_lag_and_update_period(second):
    """Lag was tested on GPU 0 only and one update period used for all: a second GPU lagging 50 ms held
    its bound on 18 of 20; a 100 ms GPU + a 20 ms one lagging 20 ms on 6 of 20, net off 28-48 %."""
    errors, net_errors, held = [], [], 0
    for seed in range(3):
        clock, devices, meter, rng = make(seed, {"source": "counter"}, gpus=[{}, second])
        for _ in range(3):
            pieces = llm_like_load(rng, rng.uniform(1, 4))
            start = clock.now()
            m = meter.measure("p", lambda: run_all(devices, pieces))
            errors.append(rel(m.reading.energy_all_runs_j, sum(m.results)))
            exact_net = sum(g.net_energy(a, b) for a, b in m.windows for g in devices)
            net_errors.append(rel(m.reading.net_energy_per_run_j * m.reading.repetitions, exact_net))
            held += abs(errors[-1]) <= m.reading.error_bound
            assert start <= m.windows[0][0]
        if "counter_update_s" in second:
            assert meter.state.update_period(meter.primary, 1) == pytest.approx(0.02, abs=0.002)
        meter.close()
    assert held == len(errors) and max(map(abs, errors)) < 0.005
    assert max(map(abs, net_errors)) < 0.02


# ---- 5. diagnostics that do not mislead ----------------------------------------------------------------

def test_the_cross_check_names_a_longer_averaging_window_not_a_mis_scaled_source():
    """An H100 whose instant field truly averages 1 s while 25 ms is assumed: the polled second opinion
    disagrees with the counter, and so does the idle right after work — the cross-check blamed "a
    mis-scaled source". The idle agrees once a 1 s window has emptied: the window is the cause."""
    from harness.energy.crosscheck import verdict

    clock, (gpu,), meter, rng = make(0, {"source": "counter", "idle_every_s": 0.0}, power_window_s=1.0)
    m = meter.measure("p", lambda: gpu.run([(3.0, 400.0)]))
    out = verdict(meter.state, m.reading.energy_all_runs_j, 0.8 * m.reading.energy_all_runs_j, 0.01,
                  work_end=m.windows[-1][1])  # a flagged pair
    meter.close()
    assert out["cross_check_flag"] and out["cross_check_suspect"] == "window", out
    assert "averaging window is likely longer" in out["cross_check_evidence"]
    # a correctly described reading that disagrees at idle too is still "either" (mis-scaled)
    clock, (gpu,), meter, rng = make(0, {"source": "counter", "idle_every_s": 0.0})
    m = meter.measure("p", lambda: gpu.run([(3.0, 400.0)]))
    meter.state.idle.post.watts[-1] = [w * 0.8 for w in meter.state.idle.post.watts[-1]]
    meter.state.cross_idle_ratio = 1.25  # mis-scaled: the readings disagree at settled idle too
    out = verdict(meter.state, m.reading.energy_all_runs_j, 0.8 * m.reading.energy_all_runs_j, 0.01,
                  work_end=m.windows[-1][1])
    meter.close()
    assert out["cross_check_suspect"] == "either", out


# ---- 3. bounds that inform: a fast sensor under a periodic load ------------------------------------------

def test_a_50_ms_sensor_under_a_10_hz_load_is_timed_on_its_refresh_grid():
    """A 50 ms sensor (25 ms window) polled at 50 Hz under a 10 Hz load: the sampler's ± 10 ms refresh
    times repeat with the load's period (20 ms polls, 50 ms refreshes: every 100 ms), so phase-shifted
    trials did not average them out — 1.3 % mean, 6 % worst, bound missed with phases verified. Refresh
    times on the fitted grid instead."""
    from harness.energy.simloads import square_wave

    errors, held = [], 0
    for seed in range(3):
        clock, (gpu,), meter, rng = make(seed, {"source": "power", "gpu": {"name": "p50", "power_window_s": 0.025}},
                                         power_update_s=0.05, power_window_s=0.025)
        for _ in range(2):
            pieces = [(rng.uniform(0, 0.1), 110.0)] + square_wave(0.1, 0.5, 420.0, 100.0, 3.0)
            m = meter.measure("p", lambda: gpu.run(pieces))
            errors.append(abs(rel(m.reading.energy_all_runs_j, sum(m.results))))
            held += errors[-1] <= m.reading.error_bound
        meter.close()
    assert held == len(errors) and max(errors) < 0.005, errors


def test_tails_blinded_by_an_idle_step_after_work_keep_only_what_they_cannot_fake():
    """Once the idle is seen stepping down after work (issue 30.5), a tail's "behind" is no sign of lag: the
    lower bound the tails gave is dropped (a sensor profile's stays), later "behind"s are ignored, "caught up"s
    still narrow it, and the lag is taken mid-bracket (0 while no tail was behind, before)."""
    from harness.energy.sensors import Sensor

    fooled = Sensor("energy", "energy")
    fooled.lag_seen(0.0565, True)   # the step taken for lag
    fooled.lag_seen(0.0586, False)
    assert fooled.lag_estimate() == pytest.approx(0.05755)
    fooled.rise_hi = 0.07
    fooled.blind_tails()
    assert (fooled.lag_lo, fooled.lag_hi) == (0.0, 0.0586) and fooled.lag_estimate() == pytest.approx(0.0293)
    fooled.lag_seen(0.05, True)
    fooled.lag_seen(0.052, False)
    assert (fooled.lag_lo, fooled.lag_hi) == (0.0, 0.052)

    profiled = Sensor("energy", "energy")
    profiled.seed_lag(0.03)
    profiled.lag_seen(0.032, True)
    profiled.blind_tails()
    assert profiled.lag_lo == pytest.approx(0.025) and profiled.lag_hi == pytest.approx(0.035)
