"""Issue 30 item 1: a run without a sensor profile characterises its polled power reading at start, from
one load step of its own workload (harness/energy/selfcheck.py). Simulated NVML in virtual time (no
wall-clock assertions): the simulator's true window differs from what the tables assume."""
from __future__ import annotations

import math
import random

import pynvml
import pytest

from harness.energy import hardware, make_energy_meter, profiles, selfcheck
from harness.energy.simloads import llm_like_load, square_wave
from harness.energy.simulated import SimClock, SimGPU, SimulatedNVML

FAST = {"idle_baseline_s": 0.5, "infer_update_period_s": 0.5, "host": False, "min_window_s": 1.0,
        "min_repetitions": 2}
H100 = {"name": "NVIDIA H100 80GB HBM3", "architecture": pynvml.NVML_DEVICE_ARCH_HOPPER, "idle_w": 70.0}
A100 = {"name": "NVIDIA A100-SXM4-80GB", "architecture": pynvml.NVML_DEVICE_ARCH_AMPERE, "idle_w": 60.0,
        "power_limit_w": 400.0, "has_counter": False}


@pytest.fixture(autouse=True)
def _no_profiles(tmp_path, monkeypatch):
    monkeypatch.setenv(profiles.ENV, str(tmp_path))  # no sensor profile of this machine's cache is used


def cell(seed: int, cfg: dict, prompts: int = 2, stall_hz: float | None = None, load=llm_like_load, **gpu):
    """Prompts of 1.5-3 s of an LLM-like load (or ``load(rng, seconds)``) measured by the polled meter:
    (relative errors, bounds, the meter's summary, the last reading)."""
    clock = SimClock(700.0 + 3.1 * seed)
    rng = random.Random(seed)
    sim = SimGPU(clock, power_phase_s=rng.uniform(0, 0.1), counter_phase_s=rng.uniform(0, 0.1), **gpu)
    meter = make_energy_meter({**FAST, **cfg}, [0], nvml=SimulatedNVML([sim], clock), clock=clock)
    if stall_hz:
        clock.stall(math.inf, 1 / stall_hz)
    errors, bounds, reading = [], [], None
    for _ in range(prompts):
        pieces = load(rng, rng.uniform(1.5, 3.0))
        measured = meter.measure("prompt", lambda pieces=pieces: sim.run(pieces))
        reading = measured.reading
        truth = sum(measured.results)
        errors.append((reading.energy_all_runs_j - truth) / truth)
        bounds.append(reading.error_bound)
    summary = meter.describe()
    meter.close()
    return errors, bounds, summary, reading


@pytest.mark.parametrize("seed,source,gpu", [
    (0, "power", {**H100, "power_window_s": 1.0}),          # the H100 table: 25 ms part-time; truth 1 s
    (1, "power-usage", {**A100, "usage_window_s": 1.0}),    # GA100 table: 25 ms; power.draw truly 1 s
])
def test_a_one_second_window_where_the_table_says_25_ms_is_measured_at_start(seed, source, gpu):
    errors, bounds, summary, reading = cell(seed, {"source": source}, **gpu)
    check = summary["energy_selfcheck"]
    assert check["status"] == "measured", check
    assert check["window_s_from"].startswith("measured at start")
    assert check["per_device"][0]["window_s"] == pytest.approx(1.0, rel=0.1)
    lo, hi = check["per_device"][0]["window_between_s"]
    assert lo <= 1.0 <= hi
    assert summary["energy_power_window_s"] == pytest.approx(1.0, rel=0.1)
    assert "measured at the start of this run" in reading.sensor_semantics
    # the assumed 25 ms tail missed ~5 % of every prompt with its bound held on none (issue 30)
    assert all(abs(e) < 0.01 for e in errors), errors
    assert all(abs(e) <= b for e, b in zip(errors, bounds)), (errors, bounds)


@pytest.mark.parametrize("seed,window", [(3, 1.5), (4, 2.0), (5, 1.3)])
def test_a_running_average_longer_than_the_step_s_wait_is_measured_not_assumed(seed, window):
    """power.draw averaging 1.3, 1.5 or 2 s where the table says 25 ms (held-out: no study row). The step's 1.6 s
    wait ended before the reading fell back and the fit's windows stopped at 1.35 s: "inconclusive", the 25 ms
    kept, every tail cut short — 19-37 % of each prompt missed here (8-9 % in the study's cells) with bounds
    under 1 % (held on none). Now, where the fit's
    bracket reaches the end of its windows (1.35 s), the step is watched to 3.4 s and refitted with windows up to
    3 s: the window is measured."""
    errors, bounds, summary, _ = cell(seed, {"source": "power-usage"}, **{**A100, "usage_window_s": window})
    check = summary["energy_selfcheck"]
    assert check["status"] in selfcheck.USED, check
    lo, hi = check["per_device"][0]["window_between_s"]
    assert lo <= window <= hi, check
    assert all(abs(e) < 0.01 for e in errors), errors  # 2 s read as 1.93 s (lag 18 ms): 0.5 %, within its bound
    assert all(abs(e) <= b for e, b in zip(errors, bounds)), (errors, bounds)


def test_a_window_matching_the_table_is_kept_and_said_to_be_consistent():
    _, _, summary, _ = cell(2, {"source": "power"}, prompts=1, **H100)  # truth 25 ms on 100 ms, as the table says
    check = summary["energy_selfcheck"]
    assert check["status"] == "consistent", check
    assert summary["energy_power_window_s"] == pytest.approx(0.025)
    assert check["window_s_from"].startswith("assumed") and "consistent" in check["window_s_from"]


def test_refreshes_seen_too_coarsely_keep_the_assumed_figure_and_say_why():
    _, _, summary, _ = cell(3, {"source": "power"}, prompts=1, stall_hz=16.0, **{**H100, "power_window_s": 1.0})
    check = summary["energy_selfcheck"]
    assert check["status"] == "inconclusive" and "refreshes seen only to" in check["reason"]
    assert summary["energy_power_window_s"] == pytest.approx(0.025)
    assert check["window_s_from"].startswith("assumed")


def test_no_check_where_the_figures_are_measured_or_set_or_a_counter_is_primary():
    _, _, summary, _ = cell(4, {"source": "counter"}, prompts=1, **H100)
    assert summary["energy_selfcheck"]["status"] == "not needed"
    gpu = {"name": "h100ish", "power_window_s": 0.025}
    _, _, summary, _ = cell(4, {"source": "power", "gpu": gpu}, prompts=1, **H100)
    assert summary["energy_selfcheck"]["status"] == "not needed"
    _, _, summary, _ = cell(4, {"source": "power", "self_check": False}, prompts=1, **H100)
    assert summary["energy_selfcheck"]["status"] == "not needed"


def _box_readings(window: float, lag: float, a: float, b: float, period: float = 0.1, phase: float = 0.037,
                  idle: float = 70.0, busy: float = 300.0, after: float = 40.0):
    """Refreshes of a reading averaging ``window`` published ``lag`` late, over idle → ``busy`` on
    [a, b] → idle + ``after`` (hysteresis)."""
    def level_integral(lo: float, hi: float) -> float:
        part = lambda x, y: max(0.0, min(hi, y) - max(lo, x))  # noqa: E731
        return idle * (hi - lo) + (busy - idle) * part(a, b) + after * part(b, math.inf)
    out, t = [], a - 0.4 + phase
    while t < b + 1.6:
        out.append((t, level_integral(t - lag - window, t - lag) / window))
        t += period
    return out


@pytest.mark.parametrize("window,lag", [(1.0, 0.0), (0.3, 0.03), (0.6, 0.08)])
def test_the_step_fit_brackets_the_true_window_and_lag(window, lag):
    fit = selfcheck.fit_window(_box_readings(window, lag, 10.0, 11.3), [(10.0, 11.3)])
    assert fit is not None
    lo, hi = fit.window_between_s
    assert lo <= window <= hi and fit.narrow()
    assert fit.lag_between_s[0] - 0.002 <= lag <= fit.lag_between_s[1] + 0.002
    assert fit.step_w == pytest.approx(230.0, rel=0.05)


def test_verdicts():
    fit = selfcheck.Fit(0.5, (0.45, 0.55), 0.0, (0.0, 0.01), 200.0, 3.0, 30)
    assert selfcheck.verdict(fit, 0.025, 0.1, 0.0005)[0] == "measured"
    assert selfcheck.verdict(fit, 0.5, 0.1, 0.0005)[0] == "consistent"
    assert selfcheck.verdict(fit, 0.025, 0.1, 0.03)[0] == "inconclusive"           # polls too coarse
    assert selfcheck.verdict(None, 0.025, 0.1, 0.0005)[0] == "inconclusive"
    noisy = selfcheck.Fit(0.5, (0.45, 0.55), 0.0, (0.0, 0.01), 20.0, 30.0, 30)
    assert selfcheck.verdict(noisy, 0.025, 0.1, 0.0005)[0] == "inconclusive"
    wide = selfcheck.Fit(0.05, (0.002, 0.12), 0.0, (0.0, 0.09), 200.0, 15.0, 30)
    assert selfcheck.verdict(wide, 0.1, 0.1, 0.0005)[0] == "consistent"
    # a bracket reaching below the update period: the window may be part-time, whatever was assumed (near or
    # far): bracketed, narrowed from the trials' edges (issue 30 item 1; "near" was kept before, unshifted)
    assert selfcheck.verdict(wide, 0.2, 0.1, 0.0005)[0] == "bracketed"
    assert selfcheck.verdict(wide, 1.0, 0.1, 0.0005)[0] == "bracketed"
    above = selfcheck.Fit(0.3, (0.15, 0.45), 0.0, (0.0, 0.09), 200.0, 15.0, 30)  # wide, but not part-time
    assert selfcheck.verdict(above, 0.6, 0.1, 0.0005)[0] == "inconclusive"         # near: kept
    assert selfcheck.verdict(above, 2.0, 0.1, 0.0005)[0] == "bracketed"            # far outside: its upper end


def test_a_short_window_where_the_table_says_1_s_is_bracketed_and_its_upper_end_used():
    """power.draw truly a 100 ms average where the Hopper table says 1 s: the step brackets the window
    widely (a bursty load on 100 ms updates) but far from 1 s; the record no longer states 1 s, and the
    upper end used still counts every reading that saw the work."""
    errors, bounds, summary, _ = cell(5, {"source": "power-usage"}, prompts=1,
                                      **{**H100, "usage_window_s": 0.1, "has_counter": False})
    check = summary["energy_selfcheck"]
    assert check["status"] == "bracketed" and "upper end" in check["window_s_from"]
    assert 0.1 <= summary["energy_power_window_s"] < 0.4
    assert all(abs(e) <= b for e, b in zip(errors, bounds)), (errors, bounds)


def _square(rng: random.Random, seconds: float):
    return square_wave(0.1, 0.4, 350.0, 120.0, seconds)  # locked to the 100 ms refresh: aliasing at its worst


@pytest.mark.parametrize("seed,truth,assumed,gpu,load", [
    (11, 0.05, None, {**H100, "has_counter": False}, llm_like_load),                # 50 ms where 1 s is assumed
    (20, 0.025, 0.5, {**H100, "has_counter": False}, llm_like_load),                # 25 ms where 0.5 s is assumed
    (13, 0.025, None, {**H100, "has_counter": False}, _square),                     # a 10 Hz load, 25 ms vs 1 s
    (14, 0.05, None, {"name": "NVIDIA L40S", "architecture": pynvml.NVML_DEVICE_ARCH_ADA, "has_instant": False,
                      "has_counter": False, "idle_w": 35.0}, llm_like_load),        # Ada's 1 s table, truly 50 ms
])
def test_a_part_time_window_where_a_long_one_is_assumed_is_narrowed_from_the_trials_edges(
        seed, truth, assumed, gpu, load, monkeypatch):
    """Issue 30 item 1 (held-out variants of the study's "power.draw 25 ms, table 1 s, no counter"): one
    start-up step on a bursty load only brackets a part-time window (2 ms to a few hundred), and its upper
    end, used as a whole window, stopped phase shifting: off by several % against bounds of 0.1-0.4 %. The
    trials are now phase-shifted while a part-time window is possible, and their own falling edges narrow
    the window; every prompt holds its bound."""
    if assumed is not None:
        monkeypatch.setattr(hardware, "HOPPER_USAGE", hardware.PowerSemantics(0.1, assumed, "a table's figure"))
    errors, bounds, summary, reading = cell(seed, {"source": "power-usage"}, prompts=3, load=load,
                                            **{**gpu, "usage_window_s": truth})
    # the window recorded with every reading: 0.06-0.5 s on the previous code (the bracket's upper end, or the
    # assumed figure where the bracket came near it)
    assert summary["energy_power_window_s"] == pytest.approx(truth, rel=0.3), summary["energy_power_window_s"]
    assert all(abs(e) <= b for e, b in zip(errors, bounds)), (errors, bounds)
    check = summary["energy_selfcheck"]
    assert check["status"] == "bracketed", check
    lo, hi = check["edges"][0]["window_between_s"]
    assert lo <= truth <= hi + 0.002 and summary["energy_power_window_s"] == pytest.approx(hi), check["edges"]
    assert "falling edges of this run's trials" in reading.sensor_semantics


def test_a_window_shorter_than_the_phases_spacing_is_not_taken_to_be_tiled():
    """A 10 ms part-time window where 1 s is assumed: the 8 phase-shifted trials (12.5 ms apart) cannot tile
    it. Its edges narrow it to ~7-12 ms; the phases are checked against the lower end (not the upper end, which
    the tails use), so they do not verify and the wide aliasing bound is stated: every prompt holds it (with
    the upper end, seeds 30, 32 and 33 missed bounds of 0.5-0.9 % by up to 1.2 %)."""
    errors, bounds, summary, _ = cell(30, {"source": "power-usage"}, prompts=3,
                                      **{**H100, "has_counter": False, "usage_window_s": 0.01})
    assert all(abs(e) <= b for e, b in zip(errors, bounds)), (errors, bounds)
    lo, hi = summary["energy_selfcheck"]["edges"][0]["window_between_s"]
    assert lo <= 0.0105 and 0.0095 <= hi <= 0.02
