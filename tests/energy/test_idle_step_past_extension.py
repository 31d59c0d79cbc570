"""Issue 30 items 3 and 5: an idle that stays raised after work for longer than the polled trial's extension
(P-state hysteresis: +H W for D s after each stretch of work, D past the extension W + 1.5 P). The held
readings count the idle *before* each trial over (P + W)/2 on average and the post-work idle over the rest
of the extension; the post-work idle was subtracted over all of it, H × (P + W)/2 too much from every trial,
unstated (the study row "+40 W for 0.3 s after work": the gross bound held on 17 % of prompts, 0.3× the
error). Now the lead-in's share is priced at the reading held at the trial's start where the readings after
work show the raised idle flat past the extension's end, and the mismatch is stated where they cannot
(:mod:`harness.energy.pretrial`). Held-out variants, not the study row: other step heights and lengths, and
other sensors (a 117 ms window on 100 ms, Volta's 10 of 20 ms)."""
from __future__ import annotations

from test_energy_study import STUDY  # the study module, loaded once (scripts/ is no package)

from harness.energy import make_energy_meter

VARIANTS = (
    {"hysteresis_w": 25.0, "hysteresis_s": 0.5},                  # 25/100 ms: 67 % held before (1 × 6)
    {"hysteresis_w": 70.0, "hysteresis_s": 0.25},                 # 83 %
    {**STUDY.H200, "hysteresis_w": 25.0, "hysteresis_s": 0.5},    # 117/100 ms: 0 %
    {**STUDY.VOLTA, "hysteresis_w": 70.0, "hysteresis_s": 0.25},  # 10/20 ms: 83 %
)


def test_an_idle_step_lasting_past_the_polled_extension_is_bounded():
    """≥ 95 % held over the 48 prompts (2 seeds × 6 per variant; a 99 % statement misses ≥ 2 of 12 in 2 % of
    cells: at most one miss per variant), and a bound that is not absurdly wide: median bound ÷ median error
    ≤ 15 per variant (8-12 measured; the errors fell to 0.01-0.03 %)."""
    held, total = 0, 0
    for gpu in VARIANTS:
        variant = STUDY.Scenario(f"idle step {gpu}", "30.5 edges", (1, 4), ("polled",), gpu=gpu)
        s = STUDY.summarize([STUDY.run_cell(make_energy_meter, variant, "polled", seed, 6) for seed in range(2)])
        assert s["bound_holds_all"] >= 11 / 12 - 1e-9, (gpu, s)
        assert s["informs"] <= 15.0, (gpu, s)
        held, total = held + round(s["bound_holds_all"] * s["stated"]), total + s["stated"]
    assert held >= 0.95 * total, (held, total)
