"""Issue 23: energy that survives a real GPU. Each fault class of the issue, reproduced on a simulated
NVML in virtual time (sensor behaviour after Yang, Adamek & Armour 2023), and what the meter must do:
glitches are gaps, bounds hold, idle is settled, the counter is characterised, state mid-cell is
flagged, a counter going backwards is NaN with the reason, the naive sum states an honest bound, the
cross-check says which source the evidence points at. Accuracy only (no wall times); the broad study
is scripts/study_energy_accuracy.py (its slow run: tests/energy/test_energy_study.py)."""
from __future__ import annotations

import math
import random
import statistics

import pynvml
import pytest

from harness.energy import make_energy_meter
from harness.energy.gpustate import device_state
from harness.energy.simloads import llm_like_load, square_wave, stretched
from harness.energy.simulated import SimClock, SimGPU, SimulatedNVML

QUICK = {"infer_update_period_s": 0.5, "idle_baseline_s": 0.5, "host": False}


def cell(seed: int = 0, cfg: dict | None = None, prompts: int = 6, lengths=(1.0, 3.0), shape=None, before=None,
         **gpu_kwargs):
    """Measure ``prompts`` generations (with the runner's work between them); per prompt (reading,
    exact gross energy, exact net energy). ``before(i, gpu, nvml, clock)`` runs before prompt i."""
    rng = random.Random(seed)
    clock = SimClock(700.0 + 3.1 * seed)
    gpu_kwargs.setdefault("power_phase_s", rng.uniform(0, 0.1))
    gpu_kwargs.setdefault("counter_phase_s", rng.uniform(0, 0.1))
    gpu = SimGPU(clock, **gpu_kwargs)
    nvml = SimulatedNVML([gpu], clock)
    meter = make_energy_meter({**QUICK, **(cfg or {})}, [0], nvml=nvml, clock=clock)
    out = []
    for i in range(prompts):
        if before is not None:
            before(i, gpu, nvml, clock)
        pieces = (shape or llm_like_load)(rng, rng.uniform(*lengths))
        spans = []

        def workload(pieces=pieces):
            start = clock.now()
            energy = gpu.run(pieces)
            spans.append((start, clock.now()))
            return energy

        m = meter.measure(f"prompt {i}", workload)
        # the measured runs: those inside a trial's window (not the start-up self-check's, nor a dropped trial's)
        spans = [(a, b) for a, b in spans if any(wa <= a and b <= wb for wa, wb in m.windows)]
        out.append((m.reading, sum(m.results), sum(gpu.net_energy(a, b) for a, b in spans)))
        gpu.run([(0.1, 250.0)])  # the runner's output-perplexity pass
        clock.sleep(0.1)
    meter.close()
    return out


def rel(estimate: float, truth: float) -> float:
    return (estimate - truth) / truth


def holds(reading, truth: float, net: float | None = None) -> bool:
    ok = abs(rel(reading.energy_all_runs_j, truth)) <= reading.error_bound
    if net is not None:
        ok = ok and abs(rel(reading.net_energy_per_run_j * reading.repetitions, net)) <= reading.net_error_bound
    return ok


# ---- 1. a failed poll is a gap, not the end --------------------------------------------------------

@pytest.mark.parametrize("source", ["counter", "power"])
def test_a_burst_of_timeouts_costs_at_most_the_windows_it_touches(source):
    """One 150 ms burst of NVML timeouts mid-cell: the sampler used to mark the channel failed for the
    rest of the cell (24 of 40 prompts NaN). Every prompt is measured, within its bound."""
    def burst(i, gpu, nvml, clock):
        if i == 2:
            nvml.glitch(clock.now() + 0.5, clock.now() + 0.65, pynvml.NVML_ERROR_TIMEOUT)

    rows = cell(1, {"source": source}, prompts=5, before=burst)
    assert all(math.isfinite(r.energy_all_runs_j) for r, _, _ in rows), [r.reason for r, _, _ in rows]
    assert all(holds(r, truth) for r, truth, _ in rows)
    assert sum(r.failed_polls for r, _, _ in rows) > 0  # counted, and said per prompt


@pytest.mark.parametrize("code", [pynvml.NVML_ERROR_UNKNOWN, pynvml.NVML_ERROR_IN_USE])
def test_random_nvml_errors_are_retried_not_fatal(code):
    """0.2 % of NVML calls fail at random ('Unknown error', 'In use'): 23-40 of 40 prompts were NaN."""
    for source in ("counter", "power"):
        rows = cell(2, {"source": source}, prompts=4,
                    before=lambda i, gpu, nvml, clock: i == 0 and nvml.error_rate(0.002, code, seed=3))
        assert all(math.isfinite(r.energy_all_runs_j) and holds(r, truth) for r, truth, _ in rows), source


def test_a_lost_gpu_or_a_source_failing_for_max_gap_s_ends_energy():
    """Only a fatal error (GPU lost) or failures without a break for energy.max_gap_s stop a source."""
    rows = cell(3, {"max_gap_s": 1.0}, prompts=3,
                before=lambda i, gpu, nvml, clock: i == 1 and nvml.glitch(clock.now(), clock.now() + 60.0))
    first, later = rows[0][0], rows[-1][0]
    assert math.isfinite(first.energy_all_runs_j)
    assert math.isnan(later.energy_all_runs_j) and "failing for" in later.reason


def test_a_polled_trial_touched_by_a_hidden_refresh_is_rerun():
    """A 250 ms burst hides two refreshes of the power reading inside a trial: that trial is run
    again (the measurement's other trials stand), and the reading says so."""
    rows = cell(4, {"source": "power", "min_window_s": 1.0}, prompts=2, lengths=(0.8, 0.8),
                before=lambda i, gpu, nvml, clock: i == 1 and nvml.glitch(clock.now() + 1.0, clock.now() + 1.25))
    reading, truth, _ = rows[1]
    assert math.isfinite(reading.energy_all_runs_j) and holds(reading, truth)
    assert "rerun after failed polls" in reading.error_basis


# ---- 2. run time varying between runs ----------------------------------------------------------------

def test_polled_energy_is_not_biased_by_run_time_varying_between_trials():
    """Runs slow down and speed up with the GPU's clocks (±30 %, over tens of seconds): averaging
    energy per run over trials over-weighted trials of slower runs (+4 %). Weighted by time, the
    error stays within the bound and unbiased."""
    errors = []
    for seed in range(3):
        rng, rows = random.Random(seed), []
        clock = SimClock(100.0 + seed)
        gpu = SimGPU(clock, power_phase_s=rng.uniform(0, 0.1))
        meter = make_energy_meter({**QUICK, "source": "power"}, [0], nvml=SimulatedNVML([gpu], clock), clock=clock)
        for _ in range(2):
            base = llm_like_load(rng, 0.5)
            m = meter.measure("p", lambda: gpu.run(stretched(base, 1 + 0.3 * math.sin(clock.now() / 3.0))))
            rows.append((m.reading, sum(m.results)))
        meter.close()
        for reading, truth in rows:
            errors.append(rel(reading.energy_all_runs_j, truth))
            assert abs(errors[-1]) <= reading.error_bound
            assert reading.run_time_cv > 0.05 and "run-time weighting" in reading.error_basis
    assert abs(statistics.mean(errors)) < 0.01


# ---- 3. net energy subtracts the settled idle --------------------------------------------------------

@pytest.mark.parametrize("source", ["counter", "power"])
def test_net_energy_subtracts_the_settled_idle_not_p_state_hysteresis(source):
    """After work the GPU stays +40 W above its idle floor for 1.5 s: idle measured 0.1-0.2 s after
    each prompt made net energy 14-24 % low. Idle is taken where the GPU has settled."""
    rows = cell(5, {"source": source}, prompts=4, hysteresis_w=40.0, hysteresis_s=1.5)
    for reading, truth, net in rows:
        assert reading.idle_definition.startswith("settled")
        assert abs(rel(reading.net_energy_per_run_j * reading.repetitions, net)) < 0.02
        assert holds(reading, truth, net)


def test_a_wandering_idle_widens_the_net_bound_instead_of_breaking_it():
    """Idle wandering 60-90 W with an 11 s period: net cannot be exact, but its bound must hold."""
    rows = cell(6, {"source": "counter"}, prompts=6, idle_w=75.0, idle_wave_w=15.0, idle_wave_period_s=11.0)
    assert sum(holds(r, truth, net) for r, truth, net in rows) >= 5


# ---- 4. the counter as measured: lag, resolution, update period --------------------------------------

def test_a_lagging_counter_is_waited_for_at_the_tail():
    """The counter shows energy 50 ms late: the tail's refresh had not caught up (2.5 % worst, bound
    held in 19/40). The tail now waits for a refresh that has, and the lag is measured."""
    rows = cell(7, {"source": "counter"}, prompts=6, counter_lag_s=0.05)
    assert all(abs(rel(r.energy_all_runs_j, truth)) < 0.005 and holds(r, truth) for r, truth, _ in rows)
    assert 0.03 < rows[-1][0].counter_lag_s < 0.1


def test_coarse_counter_steps_are_measured_and_in_the_bound():
    """A counter moving in 15 J steps: the bound assumed 2 mJ (held 20/40). The resolution is
    measured at start-up, windows are lengthened until it weighs little, and the bound holds."""
    rows = cell(8, {"source": "counter"}, prompts=4, counter_resolution_j=15.0)
    for reading, truth, net in rows:
        assert reading.counter_resolution_j == pytest.approx(15.0)
        assert holds(reading, truth, net) and abs(rel(reading.energy_all_runs_j, truth)) < 0.02


def test_a_counter_refreshed_once_a_second_is_characterised_not_nan():
    """A counter refreshed every 1 s: its period was not inferred in 1 s of polling and 30/40 prompts
    were NaN, the rest −3.7 %. It is inferred (longer polling at start-up) and windows are exact."""
    rows = cell(9, {"source": "counter", "infer_update_period_s": 1.0, "idle_baseline_s": 1.0}, prompts=4,
                counter_update_s=1.0)
    assert all(math.isfinite(r.energy_all_runs_j) and holds(r, truth) for r, truth, _ in rows)
    assert all(abs(rel(r.energy_all_runs_j, truth)) < 0.005 for r, truth, _ in rows)
    assert rows[0][0].update_period_s == pytest.approx(1.0, abs=0.01)


# ---- 5. refresh jitter --------------------------------------------------------------------------------

def test_phases_are_verified_against_the_jitter_actually_observed():
    """Each refresh ±5 ms off its grid, 10 Hz load: trials were aimed from one (jittered) refresh and
    said to be verified (2.5-4.2 % mean, bound held 22-26/40). The grid is fitted, the jitter measured
    and carried into the phases' uncertainty and the bound."""
    ten_hz = lambda r, seconds: [(r.uniform(0, 0.1), 110.0)] + square_wave(0.1, 0.5, 420.0, 100.0, seconds)
    rows = cell(10, {"source": "power"}, prompts=2, lengths=(3.0, 5.0), shape=ten_hz, power_jitter_s=0.005)
    for reading, truth, _ in rows:
        assert reading.refresh_jitter_s == pytest.approx(0.005 / math.sqrt(3), rel=0.35)
        assert holds(reading, truth)


# ---- 6. GPU state during the cell -----------------------------------------------------------------------

def test_throttling_and_another_process_mid_cell_flag_the_prompts_they_touch():
    """Throttling reported only under load, and another process present only mid-cell, were never
    flagged (state was read at start and end, both idle)."""
    def state(i, gpu, nvml, clock):
        gpu.throttle_reasons_active = pynvml.nvmlClocksThrottleReasonSwPowerCap if i == 1 else 0
        if i == 3:
            gpu.add_process(4321, 60.0, clock.now(), clock.now() + 1.0)

    rows = cell(11, {"source": "counter"}, prompts=5, before=state)
    assert [r.throttled for r, _, _ in rows] == [False, True, False, False, False]
    assert [r.shared for r, _, _ in rows] == [False, False, False, True, False]
    assert rows[1][0].throttle_reasons == "sw_power_cap" and rows[3][0].other_pids == "4321"


def test_device_state_survives_a_driver_lacking_a_function():
    """gpustate.device_state looked NVML functions up outside its try: a binding without one crashed
    meter creation."""
    clock = SimClock(0.0)
    nvml = SimulatedNVML([SimGPU(clock)], clock)

    class Lacking:
        def __getattr__(self, name):
            if "ClocksEventReasons" in name or "ClocksThrottleReasons" in name or name == "NVML_CLOCK_SM":
                raise AttributeError(name)
            return getattr(nvml, name)

    state = device_state(Lacking(), 0)
    assert state["throttle_reasons"] is None and "throttle_reasons" in state["errors"]
    assert state["temperature_c"] is not None


# ---- 7. a counter that goes backwards ---------------------------------------------------------------------

@pytest.mark.parametrize("event", ["wrap", "reset"])
def test_a_counter_going_backwards_is_nan_with_the_reason_for_the_prompt_it_touches(event):
    """A 32-bit wrap or a reset gave −4.3 MJ with no reason, summed into the cell."""
    kwargs = {"counter_bits": 32, "counter_start_mj": 2**32 - 800_000} if event == "wrap" else {}

    def reset(i, gpu, nvml, clock):
        if event == "reset" and i == 2:
            gpu.counter_reset_at = clock.now() + 0.5

    rows = cell(12, {"source": "counter"}, prompts=5, before=reset, **kwargs)
    nan = [r for r, _, _ in rows if not math.isfinite(r.energy_all_runs_j)]
    assert len(nan) == 1 and "went backwards" in nan[0].reason
    assert all(abs(rel(r.energy_all_runs_j, truth)) < 0.01 for r, truth, _ in rows if math.isfinite(r.energy_all_runs_j))


# ---- 8. the naive 1 Hz sum states a bound that holds ------------------------------------------------------

def test_the_naive_one_hertz_sum_states_its_own_sampling_error():
    """energy=naive on a T4-like sensor (100 ms averages), 6-12 s generations: the bound (3.6 %) did not
    hold (8 % mean error; held 4/16). It now carries the 1 Hz sampling error."""
    naive = {"name": "naive", "source": "power-usage", "sample_hz": 1, "integration": "sum", "skip_unchanged": False,
             "align_timestamps": False, "protocol": False, "idle_baseline_s": 0.0, "idle_every_s": None,
             "infer_update_period_s": 0.0, "host": False}
    rows = cell(13, naive, prompts=8, lengths=(6.0, 12.0), name="Tesla T4",
                architecture=pynvml.NVML_DEVICE_ARCH_TURING, power_window_s=0.1, has_instant=False, idle_w=30.0)
    assert sum(holds(r, truth) for r, truth, _ in rows) >= 7
    assert all("sampled every 1 s" in r.error_basis for r, _, _ in rows)


# ---- 9. the cross-check says which source is wrong --------------------------------------------------------

def test_the_cross_check_points_at_the_polled_reading_when_a_load_aliases_it():
    """On a 10 Hz load the single polled window aliases: every prompt was flagged with no verdict
    although the counter was right."""
    ten_hz = lambda r, seconds: [(r.uniform(0, 0.1), 110.0)] + square_wave(0.1, 0.5, 420.0, 100.0, seconds)
    rows = cell(14, {"source": "counter"}, prompts=3, lengths=(3.0, 5.0), shape=ten_hz)
    flagged = [r for r, _, _ in rows if r.cross_check_flag]
    assert flagged and all(r.cross_check_suspect == "polled" for r in flagged)


def test_the_cross_check_says_a_scale_disagreement_could_be_either():
    def under_read(i, gpu, nvml, clock):
        if i == 0:
            real = gpu.counter_mj
            gpu.counter_mj = lambda t: 10**9 + round((real(t) - 10**9) * 0.9)

    rows = cell(15, {"source": "counter"}, prompts=3, lengths=(6.0, 8.0), before=under_read)
    assert "went backwards" in rows[0][0].reason  # the counter's scale changed under the first window
    for reading, _, _ in rows[1:]:
        assert reading.cross_check_flag and reading.cross_check_suspect == "either"
        assert "at idle too" in reading.cross_check_evidence


# ---- 10. cost: predictable, and cheap for short generations -----------------------------------------------

@pytest.mark.parametrize("source, seconds", [("counter", 0.3), ("counter", 2.0), ("power", 0.3)])
def test_the_planned_overhead_predicts_the_cost_and_short_generations_stay_cheap(source, seconds):
    """Sub-second generations cost ×5.6-22 the cell's time with a counter (×48-154 polled-only), and the
    protocol flipped at 1 s of generation. The overhead `harness plan` states predicts what a cell
    costs, and a counter measures a 0.3 s generation once."""
    from harness.energy.cost import expected_overhead

    cfg = {"source": source, "infer_update_period_s": 1.0, "idle_baseline_s": 1.0, "host": False}
    clock = SimClock(50.0)
    gpu = SimGPU(clock, hysteresis_w=30.0, hysteresis_s=1.0)
    meter = make_energy_meter(cfg, [0], nvml=SimulatedNVML([gpu], clock), clock=clock)
    prompts, runs = 6, []
    for _ in range(prompts):
        runs.append(meter.measure("p", lambda: gpu.run([(seconds, 300.0)])).repetitions)
    spent = clock.now() - 50.0 - prompts * seconds  # beyond one generation per prompt
    meter.close()
    predicted = expected_overhead({"energy": cfg, "gpu": {"name": "sim", "power_reading": "simulated",
                                                          "simulated": {"counter_update_s": 0.1}}})
    assert predicted.seconds(prompts, seconds) == pytest.approx(spent, rel=0.35)
    if source == "counter":
        assert max(runs) == 1


def test_the_planned_overhead_of_a_one_second_power_draw_counts_its_longer_idle_baseline():
    """Polled power.draw (NVML's 1 s running average on Hopper, Ampere, Ada): the meter's start-up idle spans 4.5
    averaging windows so that the idle's movement is measured (MeterState._baseline: 4.5 s, not 1 s), and a
    window of whole updates is not phase-shifted (one trial, not 8). The plan predicted the instant field's
    figures for every polled source."""
    from harness.energy.cost import expected_overhead

    gpu = {"name": "h100", "architecture": "hopper", "match": ["H100"]}
    instant = expected_overhead({"gpu": gpu, "energy": {"source": "power"}})
    usage = expected_overhead({"gpu": gpu, "energy": {"source": "power-usage"}})
    assert usage.startup_s == pytest.approx(instant.startup_s + 3.5)
    assert instant.trials == 8 and usage.trials == 1
