"""Issue 23's goals over the broad scenario × meter study (scripts/study_energy_accuracy.py), on
simulated GPUs in virtual time: the stated 95 % bound holds in ≥ 95 % of prompts in every scenario,
the counter path is within 1 % mean / 2 % worst gross, net within 2 % / 5 % where idle is stable,
and a glitch costs at most the windows it touches. Slow (minutes): `make test-slow`."""
from __future__ import annotations

import importlib.util
import math
import sys
from pathlib import Path

import pytest

from harness.energy import make_energy_meter

pytestmark = pytest.mark.slow
ROOT = Path(__file__).resolve().parents[2]


def study():
    spec = importlib.util.spec_from_file_location("study_energy_accuracy", ROOT / "scripts" / "study_energy_accuracy.py")
    module = importlib.util.module_from_spec(spec)
    sys.modules[spec.name] = module  # its dataclasses look their module up
    spec.loader.exec_module(module)
    return module


STUDY = study()
UNSTABLE_IDLE = ("wandering", "drift", "other process")  # idle not stable, or another process's energy in it


# Goals known not met yet, by scenario name: strict xfail, so the day one passes its mark must go. (Issue 30.5's
# counter net after an idle that steps down 0.12 s after work passes since the post-work idle is read at one delay.)
OPEN_NET_GOALS: dict[str, str] = {
    # (issue 30.1: "power.draw 25 ms, table 1 s, no counter" was open here: one start-up load step brackets a
    # part-time window only widely; the trials are now phase-shifted while a part-time window is possible and
    # their own falling edges narrow it (harness/energy/selfcheck.refine): bound held 40 -> 100 %, mark removed.)
}


def _goal_cases():
    assert set(OPEN_NET_GOALS) <= {s.name for s in STUDY.SCENARIOS}, "an open goal names no study scenario"
    return [pytest.param(s, id=s.name, marks=pytest.mark.xfail(strict=True, reason=OPEN_NET_GOALS[s.name]))
            if s.name in OPEN_NET_GOALS else pytest.param(s, id=s.name) for s in STUDY.SCENARIOS]


@pytest.mark.parametrize("scenario", _goal_cases())
def test_issue_23_goals_hold_on_every_scenario(scenario):
    for meter in scenario.meters:
        cells = [STUDY.run_cell(make_energy_meter, scenario, meter, seed, 10) for seed in range(3)]
        s = STUDY.summarize(cells)
        assert s["bound_holds"] >= 0.95 or s["stated"] == 0, (meter, s)
        if math.isfinite(s["net_bound_holds"]):
            assert s["net_bound_holds"] >= 0.95, (meter, s)
        assert s["nan"] <= s["nan_touched"] + (scenario.counter_event is not None) * 2, (meter, s)
        if meter == "counter":
            assert s["gross_mean"] <= 0.01 and s["gross_worst"] <= 0.02, s
            if not any(word in scenario.name for word in UNSTABLE_IDLE):
                assert s["net_mean"] <= 0.02 and s["net_worst"] <= 0.05, s
        if scenario.flag:
            assert s["flags_hit"] == s["flags_truth"] and s["flags_false"] == 0, s
