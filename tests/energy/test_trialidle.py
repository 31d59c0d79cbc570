"""The polled trials' powers made comparable with the idle measured at each trial's edges (issue 30.3, a load
riding on a wandering idle: harness/energy/trialidle.py)."""
from __future__ import annotations

import random
import statistics
from types import SimpleNamespace

from test_energy_study import STUDY  # the study module, loaded once (scripts/ is no package)

from harness.energy import make_energy_meter
from harness.energy.polledbound import STRATA
from harness.energy.trialidle import comparable


def _trials(edges):
    return [SimpleNamespace(stratum=STRATA[i % 8], idle_edges=list(e)) for i, e in enumerate(edges)]


def _contrast(trials, values):
    halves = [[v for t, v in zip(trials, values) if t.stratum % 2 == h] for h in (0, 1)]
    return (statistics.mean(halves[0]) - statistics.mean(halves[1])) / 2


def test_the_idle_explained_part_is_taken_out_and_the_split_half_stays_unbiased():
    """Trials whose true powers follow the idle at their edges (β = 2 before, 1 after: a load riding on the
    idle) plus independent noise σ: the fitted powers keep the mean, lose the idle's part, and the split-half
    difference scaled by the returned factor estimates the mean's noise without bias (E[f d²] = σ²/K), where
    the raw one is dominated by the idle. (The fit is skipped, by the edges alone, where it would explain the
    contrast itself, or where the raw d happens to be the smaller: rare.)"""
    rng, sigma, k = random.Random(3), 0.5, 8
    scaled, raw, kept = [], [], 0
    for _ in range(3000):
        edges = [(rng.uniform(60, 90), rng.uniform(60, 90)) for _ in range(k)]
        trials = _trials(edges)
        powers = [200 + 2 * b + a + rng.gauss(0, sigma) for b, a in edges]
        fitted, factor, lost = comparable(trials, powers)
        if lost == 0:  # the halves' idle differs so that the fit would explain the contrast itself: kept raw
            kept += 1
            continue
        assert abs(statistics.mean(fitted) - statistics.mean(powers)) < 1e-9 and factor >= 1.0 and lost == 2
        scaled.append(factor * _contrast(trials, fitted) ** 2)
        raw.append(_contrast(trials, powers) ** 2)
    assert kept < 0.1 * len(scaled) and abs(statistics.mean(scaled) / (sigma ** 2 / k) - 1) < 0.1
    assert statistics.mean(raw) > 100 * sigma ** 2 / k


def test_without_the_edges_or_with_few_trials_the_powers_are_kept():
    powers = [250.0 + i for i in range(8)]
    missing = _trials([(70.0, 71.0)] * 7 + [(70.0, float("nan"))])
    assert comparable(missing, powers) == (powers, 1.0, 0)
    assert comparable(_trials([(70.0 + i, 71.0 - i) for i in range(4)]), powers[:4]) == (powers[:4], 1.0, 0)
    flat = comparable(_trials([(70.0, 71.0)] * 8), powers)  # an idle that does not move: the mean alone
    assert max(abs(x - y) for x, y in zip(flat[0], powers)) < 1e-9 and flat[2] == 0


def test_a_polled_bound_on_a_drifting_idle_informs():
    """Held-out variants of the study's "idle 60-90 W drift, 120 s" (not study rows): the load rides on an idle
    drifting over 40-60 s. The trials (eight of several seconds) sat at different points of the drift, their real
    power differences stayed in the split-half difference and in the trials' deviations the calibrated figure's
    tiling term weighs, and the bound stated 25-34× the error (2 seeds × 6 prompts); the part the idle right
    before and after each trial explains is now taken out first: 8-13×. (≤ 5 is not reached at 6 prompts: the
    calibrated figure's readings' noise ÷ K is then the smaller statement, as on the bursty rows.)"""
    variants = [STUDY.Scenario("idle 50-90 W drift, 60 s", "3 idle", (1, 3), drift=True,
                               gpu={"idle_w": 70.0, "idle_wave_w": 20.0, "idle_wave_period_s": 60.0,
                                    "idle_wave_phase": 1.0}),
                STUDY.Scenario("idle 55-85 W drift, 40 s", "3 idle", (2, 5), drift=True,
                               gpu={"idle_w": 70.0, "idle_wave_w": 15.0, "idle_wave_period_s": 40.0,
                                    "idle_wave_phase": 2.5})]
    for scenario in variants:
        s = STUDY.summarize([STUDY.run_cell(make_energy_meter, scenario, "polled", seed, 6) for seed in (0, 1)])
        assert s["bound_holds_all"] >= 0.95, (scenario.name, s)
        assert s["informs"] <= 16.0, (scenario.name, s)
