"""Issue 30 item 3, "bounds that inform": the stated bound holds on ≥ 95 % of prompts *and* its median is
within 5× of the median actual error — over a handful of seeded simulated prompts (virtual time), on the
developers' study scenarios (scripts/study_energy_accuracy.py)."""
from __future__ import annotations

import pytest
from test_energy_study import STUDY  # the study module, loaded once (scripts/ is no package)

from harness.energy import make_energy_meter


def _summary(name: str, meter: str, seeds: int = 2, prompts: int = 6) -> dict:
    scenario = next(s for s in STUDY.SCENARIOS if s.name == name)
    return STUDY.summarize([STUDY.run_cell(make_energy_meter, scenario, meter, seed, prompts) for seed in range(seeds)])


def test_a_coarse_lagging_counter_states_a_bound_that_informs():
    """1 J steps published 100 ms late: the bound held but stated 18× the error — the resolution was taken
    from idle increments (every one 7 J: one update's idle energy) and a 2 % idle margin and floor sat on
    every edge. Now the steps come from the increments seen under load (gcd: 1 J) and the edges' idle
    from its measured movement between intervals."""
    s = _summary("coarse counter 1 J, lag 100 ms", "counter")
    assert s["bound_holds_all"] >= 0.95, s
    assert s["informs"] <= 5.0, s


def test_an_idle_step_after_work_is_not_taken_for_counter_lag():
    """P-state hysteresis: +60 W for 0.2 s after each prompt (issue 30.5: idle steps at a prompt edge). A
    tail's lag test cannot tell the idle stepping down from a lagging counter; taken as lag, the tail waited
    past the step and subtracted the idle after it: gross 1.45 % mean / 1.97 % worst off with the bound held
    on 0 of 6 prompts. The window's rising edge (only work raises the power there) now bounds the lag."""
    s = _summary("idle +60 W for 0.2 s after work", "counter")
    assert s["bound_holds_all"] >= 0.95 and s["net_bound_holds"] >= 0.95, s
    assert s["gross_worst"] < 0.002, s


def test_a_polled_part_time_reading_states_a_derived_bound_that_informs():
    """A100-like 25 ms of every 100 ms, polled only (issue 30.3): the bound was calibrated (readings' noise ÷ K
    + 2 × tiling) and stated 20× the error. Now it is derived from the trials themselves — the even phases
    against the odd ones, each half tiling the period, pooled over the cell's measurements with Student's t.
    The issue's 5× sits at the floor a 99 % statement from a pooled σ allows (t(0.995, n) × 0.97 ÷ 0.674: 5.0
    at n = 7, 4.4 at n = 15; a cell's first measurements pool fewer): 20 prompts give 4.3-5.4 by seed."""
    s = _summary("A100 polled-only", "polled", seeds=1, prompts=20)
    assert s["bound_holds_all"] >= 0.95, s
    assert s["informs"] <= 6.5, s


def test_a_jittered_polled_reading_states_a_bound_that_informs():
    """±3 ms refresh jitter under a 10 Hz load (issue 30.3: bounds of 61 % for errors of 0.1-0.6 %; then
    21× the error, calibrated). Derived now: split-half noise plus the phases' measured uncertainty × the
    trials' slope against phase (the error both halves share). The issue's 5× is not reached in a cell this
    short (Student's t on the first measurements, and the errors' median at 0.67 σ leave ≈ 5-6×): this pins
    the derived figure's coverage and keeps it well below the calibrated one."""
    s = _summary("refresh jitter ±3 ms, 10 Hz load", "polled", seeds=1, prompts=12)
    assert s["bound_holds_all"] >= 0.95, s
    assert s["informs"] <= 8.0 and s["bound_median"] <= 0.02, s


def test_a_slow_counters_idle_stretch_is_bounded_on_its_own_time_scale():
    """A counter refreshed every 1 s (and one every 200 ms in 10 mJ steps): the tail's idle stretch, up to an
    update long, was bounded by the faster power reading's movement between readings 0.1 s apart grown as a
    random walk, × Student's t on the counter's two or three start-up differences (t = 9.9): 48× and 17× the
    error. Now the faster reading's adjacent blocks as long as the stretch, the stretch and its interval
    independent halves, each term with its own degrees of freedom (IdleTracker.stretch_bound): 5-7×. The
    issue's 5× is not reached on these two (Student's t on the few blocks a 4.5 s baseline holds); 10 here."""
    for name in ("counter refreshed every 1 s", "coarse counter 200 ms / 10 mJ"):
        s = _summary(name, "counter")
        assert s["bound_holds_all"] >= 0.95 and s["net_bound_holds"] >= 0.95, (name, s)
        assert s["informs"] <= 10.0, (name, s)


def test_the_post_work_idle_is_read_at_one_delay_after_work():
    """An idle stepping down 0.1-0.2 s after work (issue 30.5): the post-work idle, read over the counter
    interval right after the tail, was read before the step on some prompts and after it on others, and net
    energy was 2.5-3.4 % off on average (8-10 % worst) with the offsets to the settled idle measured at one of
    them. It is now read from where the idle stopped moving, at one delay through the cell. The 30 ms-lag
    +45 W / 0.17 s variant is not a study scenario."""
    variant = STUDY.Scenario("idle +45 W for 0.17 s after work, lag 30 ms", "30.5 edges", (1, 4), ("counter",),
                             gpu={"hysteresis_w": 45.0, "hysteresis_s": 0.17, "counter_lag_s": 0.03})
    cells = [STUDY.run_cell(make_energy_meter, variant, "counter", seed, 6) for seed in range(2)]
    for name, s in [("idle steps down 0.12 s after work (+30 W)", _summary("idle steps down 0.12 s after work (+30 W)",
                                                                            "counter")),
                    ("idle step 0.12 s after work, counter lag 50 ms",
                     _summary("idle step 0.12 s after work, counter lag 50 ms", "counter")),
                    (variant.name, STUDY.summarize(cells))]:
        assert s["net_mean"] <= 0.02 and s["net_worst"] <= 0.05, (name, s)
        assert s["net_bound_holds"] >= 0.95 and s["bound_holds_all"] >= 0.95, (name, s)


def test_an_idle_step_shorter_than_one_counter_update_is_bounded():
    """An idle stepping down < one counter update after work (issue 30.5): the tail's idle stretch before the
    first caught-up refresh holds the step, the interval after it does not, and no later interval ever shows
    it — the bound (the idle's movement between intervals) held on 27-73 % of prompts, stating less than the
    error. The idle after work is now fitted by delay after work over the cell's tails (counter intervals and
    the power reading's short windows; harness/energy/afterwork.py): its predicted error is taken off, the
    fit's uncertainty (and where the data cannot place the step) bounded. Held-out variants of the 0.07 s
    study row: 0.05 s, 0.09 s, a 50 W step (3 seeds × 10, virtual time)."""
    for gpu in ({"hysteresis_w": 30.0, "hysteresis_s": 0.05}, {"hysteresis_w": 30.0, "hysteresis_s": 0.09},
                {"hysteresis_w": 50.0, "hysteresis_s": 0.07}):
        variant = STUDY.Scenario(f"idle step {gpu}", "30.5 edges", (1, 4), ("counter",), gpu=gpu)
        s = STUDY.summarize([STUDY.run_cell(make_energy_meter, variant, "counter", seed, 10) for seed in range(3)])
        assert s["bound_holds_all"] >= 0.95 and s["net_bound_holds"] >= 0.95, (gpu, s)
        assert s["informs"] <= 15.0 and s["gross_mean"] <= 0.002, (gpu, s)


def test_a_short_idle_step_after_work_on_a_lagging_counter_is_bounded():
    """An idle stepping down < one counter update after work on a counter that lags (issue 30.5): the bound
    held on 90-93 % of prompts. Two causes: the after-work fit let a step slide only below where it placed it
    (nnls places it as early as the data allow; the piece end above it was never reached), and a tail's lag
    test took the step for lag (a first interval above the next), bracketing the lag away from the truth
    (20 ms taken for 31-39 ms) — the stretch mis-sized, the lag term too small. Now a step may lie at every
    piece end where it fits the data as well (χ²₁ 99 %), and once the fit sees a step the tails no longer say
    "behind" (Sensor.blind_tails): the lag lies mid-bracket between 0 and what the rising edge and tails bound
    it by, the tail waits past the bracket, and the stretch's part no tail has seen is priced
    (afterwork.unseen). Held-out variants of the "lag 30 ms" study row (3 seeds × 10, virtual time)."""
    for gpu in ({"hysteresis_w": 40.0, "hysteresis_s": 0.05, "counter_lag_s": 0.02},
                {"hysteresis_w": 45.0, "hysteresis_s": 0.04, "counter_lag_s": 0.05},
                {"hysteresis_w": 25.0, "hysteresis_s": 0.1, "counter_lag_s": 0.045}):
        variant = STUDY.Scenario(f"idle step {gpu}", "30.5 edges", (1, 4), ("counter",), gpu=gpu)
        s = STUDY.summarize([STUDY.run_cell(make_energy_meter, variant, "counter", seed, 10) for seed in range(3)])
        assert s["bound_holds_all"] >= 0.95 and s["net_bound_holds"] >= 0.95, (gpu, s)
        assert s["informs"] <= 15.0 and s["gross_mean"] <= 0.002 and s["gross_worst"] <= 0.005, (gpu, s)


def test_the_polled_post_work_idle_is_read_past_where_it_stopped_moving():
    """Polled meter, an idle stepping down 0.2-0.25 s after work (issue 30.5, net beside gross): the post-work
    idle was the mean of the readings right after each trial — before the step on some, after it on others —
    and net energy was 4.7 % off on average (6.3 % worst; the +60 W / 0.2 s study row 3.7 / 9.9 %). Now the
    extension's readings stay the edges' idle (gross), and net reads the idle past where it was last seen
    moving (IdleTracker.post_delay, found while the settled idle's wait runs; later tails watch that long).
    The watch runs only where the wait follows (the idle after work off the settled level): where the wait is
    skipped it delayed the next trial and moved the A100 and ±3 ms jitter rows' split-half bounds (4.2 -> 9-11x).
    Held-out variants of the study row. (A step lasting past the extension, 0.25 s, holds the polled gross
    bound on 92 % before and after: a separate, pre-existing miss, not asserted here.)"""
    for gpu, gross in (({"hysteresis_w": 50.0, "hysteresis_s": 0.22}, True),
                       ({"hysteresis_w": 40.0, "hysteresis_s": 0.25}, False)):
        variant = STUDY.Scenario(f"idle step {gpu}", "30.5 edges", (1, 4), ("polled",), gpu=gpu)
        s = STUDY.summarize([STUDY.run_cell(make_energy_meter, variant, "polled", seed, 6) for seed in range(2)])
        assert s["net_mean"] <= 0.02 and s["net_worst"] <= 0.05 and s["net_bound_holds"] >= 0.95, (gpu, s)
        assert not gross or s["bound_holds_all"] >= 0.95, (gpu, s)


def test_a_one_second_running_average_measures_the_idles_movement():
    """A polled power.draw that is a 1 s running average (NVML's Hopper and Ampere/Ada documentation) sees every
    instant: its bound is the idle subtracted over each trial's ~1.15 s extension. The start-up baseline (1 s)
    held no two readings one window apart, so the idle's movement was never measured and an assumed 5 % (then
    2 %) of the idle level stood in: 95-220× the error. The baseline now spans ≥ 3 intervals of the longer of
    update and window (4.5 s once per cell here). Held-out variants (not study rows: an Ampere A10G-like card,
    40× → 4.4×, and a 1.5 s window, 64× → 7.1×, at 2 × 6; 2.8× and 4.2× with the extension's idle counted over
    what it can get wrong, the next test's change); the issue's 5× is reached at 3 × 10 on the study's two rows
    (58 → 5.0 → 3.1, 121 → 4.9 → 3.0); 8 here: a median over 12 prompts moves by ±30 %."""
    a10g = STUDY.Scenario("A10G power.draw 1 s", "Yang sensors", (2, 6), ("polled",), polled_source="power-usage",
                          gpu={"name": "NVIDIA A10G", "architecture": STUDY.NVML.NVML_DEVICE_ARCH_AMPERE,
                               "has_instant": False, "usage_window_s": 1.0, "idle_w": 25.0},
                          profile={"name": "a10g", "architecture": "ampere"})
    slow = STUDY.Scenario("power.draw 1.5 s (profiled)", "Yang sensors", (3, 8), ("polled",),
                          polled_source="power-usage",
                          gpu={"name": "NVIDIA L4", "architecture": STUDY.NVML.NVML_DEVICE_ARCH_ADA,
                               "has_instant": False, "usage_window_s": 1.5, "idle_w": 20.0},
                          profile={"name": "l4", "architecture": "ada", "power_window_s": 1.5})
    for scenario in (a10g, slow):
        s = STUDY.summarize([STUDY.run_cell(make_energy_meter, scenario, "polled", seed, 6) for seed in range(2)])
        assert s["bound_holds_all"] >= 0.95, (scenario.name, s)
        assert s["informs"] <= 8.0, (scenario.name, s)


def test_a_full_coverage_readings_idle_term_counts_only_the_idle_it_can_get_wrong():
    """A reading that sees every instant (Turing: a 100 ms window on a 100 ms update) states only the idle
    subtracted over each trial's extension. It was the idle's movement × the whole extension (W + 1.5 P = 250 ms):
    3.75× a normal 99 % bound from the errors' RMS, 12-15× the median error. The post-work readings the
    subtraction uses are the ones held over most of the extension; what they cannot see is the idle the held
    readings count before the trial (≤ P for a part-time window, (W + P)/2 for whole updates) and their unequal
    holds after it (polled._unmatched). Held-out variants (not study rows): 10.9 → 5.8 and 13.2 → 6.9 at 2 × 6;
    the issue's 5× is not reached: the errors' own q95 ÷ median is 2.5 and Student's t on the idle's 9 start-up
    differences (3.25 for Z = 2.58) stays in it. 9 here."""
    nv = STUDY.NVML
    rtx = STUDY.Scenario("RTX 6000 (Turing) 100/100 ms, prefill", "Yang sensors", (2, 6), ("polled",),
                         load="prefill", gpu={"name": "Quadro RTX 6000", "architecture": nv.NVML_DEVICE_ARCH_TURING,
                                              "power_window_s": 0.1, "idle_w": 45.0, "power_limit_w": 260.0,
                                              "has_instant": True})
    t4 = STUDY.Scenario("T4 100/100 ms, thermal ramp", "Yang sensors", (1, 3), ("polled",), load="ramp:0.1",
                        gpu={**STUDY.T4, "has_instant": True})
    for scenario in (rtx, t4):
        s = STUDY.summarize([STUDY.run_cell(make_energy_meter, scenario, "polled", seed, 6) for seed in range(2)])
        assert s["bound_holds_all"] >= 0.95, (scenario.name, s)
        assert s["informs"] <= 9.0, (scenario.name, s)


def test_the_lead_stretch_inside_the_runners_own_idle_step_is_bounded_by_the_fitted_steps():
    """An idle stepping down 0.15-0.2 s after work (issue 30.3/30.5): the idle before each prompt sits inside the
    step the runner's own pass between prompts leaves (0.1 s on the GPU, 0.1 s on the CPU), so the lead's stretch
    was bounded by how the idle moves right after work (the after-work pool's RMS, 25-35 W, or the edge curve's
    spread) — 2-6.6 J on errors of ≈ 0.02 J, the bound 54× the error on the +60 W study row (3 × 10). Where the
    after-work fit models the steps, the lead stretch (wholly after the synchronise, the GPU idle) draws the idle
    at rest plus at most what the fitted steps still add at its shortest delay after work: that band against the
    rate taken, over the stretch as long as the lag's bracket lets it be, plus the idle's movement at rest
    (afterwork.lead). Held-out variants, 2 seeds × 6 (virtual time), before (1ca83f2) → after: +80 W / 0.15 s
    17.3 → 6.5, +70 W / 0.2 s 45 → 19, +55 W / 0.21 s 50 → 25, +35 W / 0.13 s with a 45 ms lag 5.9 → 2.1 (held
    100 % at 8 × 10 too). The issue's 5× is not reached where the step outlasts the runner's gap: the counter
    cannot tell whether the step ended inside the lead stretch (the runner's work end is known only to an
    update), so the band's full height counts."""
    for gpu, informs in (({"hysteresis_w": 80.0, "hysteresis_s": 0.15}, 10.0),
                         ({"hysteresis_w": 70.0, "hysteresis_s": 0.2}, 30.0),
                         ({"hysteresis_w": 55.0, "hysteresis_s": 0.21}, 35.0),
                         ({"hysteresis_w": 35.0, "hysteresis_s": 0.13, "counter_lag_s": 0.045}, 4.0)):
        variant = STUDY.Scenario(f"idle step {gpu}", "30.5 edges", (1, 4), ("counter",), gpu=gpu)
        s = STUDY.summarize([STUDY.run_cell(make_energy_meter, variant, "counter", seed, 6) for seed in range(2)])
        assert s["bound_holds_all"] >= 0.95 and s["net_bound_holds"] >= 0.95, (gpu, s)
        assert s["informs"] <= informs, (gpu, s)
