"""``harness-gpu-check``'s AR loop (:mod:`harness.tools.cost_curves`) times decoding after its warm-up (issue 28
item 4): no first-time cost of the one-token steps in the timed window. Clocks injected; no absolute times."""
from harness.testing import toy_model
from harness.tools.cost_curves import ar_step_profile, ar_tokens_per_s


def test_the_timed_window_starts_after_the_warmup_steps():
    model = toy_model(8, seed=0, hidden=16, layers=1)
    calls, reads = [0], []
    model.register_forward_hook(lambda *_: calls.__setitem__(0, calls[0] + 1))

    def clock():
        reads.append(calls[0])
        return float(len(reads))  # one "second" between the two reads

    rate = ar_tokens_per_s(model, "cpu", tokens=5, prefix=4, warmup=3, clock=clock)
    assert reads == [1 + 3, 1 + 3 + 5]  # prefill + warm-up before the start; the 5 timed steps inside
    assert rate == 5.0


def test_step_profile_reports_first_and_warm_steps():
    prof = ar_step_profile(toy_model(8, seed=0, hidden=16, layers=1), "cpu", tokens=4, prefix=4, warmup=2)
    assert set(prof) == {"first_s", "median_s", "mean_s", "max_s", "host_median_s", "warmup_steps"}
    assert prof["max_s"] >= prof["median_s"] > 0 and prof["host_median_s"] > 0
