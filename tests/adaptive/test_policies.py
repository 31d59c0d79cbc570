"""γ policies of the adaptive paper's §4 against simulated rounds (no models). Their exactness inside the real
decoders (and a peeking policy caught) is tests/adaptive/test_policy_decoders.py's."""
from __future__ import annotations

import math
import random
import time

import pytest

from harness.adaptive import estimators as est
from harness.adaptive.policies import POLICIES, make_gamma_policy
from harness.adaptive.policies.fixed import FixedGamma
from harness.adaptive.policies.qlearning import QLearningParams, QLearningPolicy
from harness.errors import ConfigError
from harness.primitives.round import Round
from harness.testing.policies import objective_argmax, simulate_rounds

NAN = float("nan")


def obs(gamma, accepted, committed=None, draft=NAN, verify=NAN):
    committed = tuple(committed) if committed is not None else tuple(range(100, 101 + accepted))
    return Round(committed, gamma=gamma, accepted=accepted, draft_nodes=gamma, draft_time_s=draft,
                 verify_time_s=verify)


# ---------------------------------------------------------------- factory and bounds

def test_factory_builds_every_policy_with_defaults():
    for name in POLICIES.all():
        p = make_gamma_policy(name)
        p.reset([1, 2, 3])
        assert 1 <= p.next_gamma() <= 8
        assert p.name == name
    assert isinstance(make_gamma_policy("fixed", gamma=3), FixedGamma)


@pytest.mark.parametrize("name,kwargs,key", [
    ("nope", {}, "unknown gamma policy"),
    ("online", {"acc_history": 0}, "acc_history = 0"),
    ("online", {"acc_max": 1.0}, "acc_max"),
    ("online", {"acc_estimator": "newton"}, "acc_estimator"),
    ("online", {"gamma_min": 5, "gamma_max": 3}, "gamma_max"),
    ("fsm", {"gamma_min": -1}, "gamma_min"),
    ("fsm", {"gamma_max": 1000}, "gamma_max"),
    ("fsm", {"acc_history": 3}, "unknown parameter"),
    ("qlearning", {"lr": 0.0}, "lr"),
    ("qlearning", {"discount": 1.0}, "discount"),
    ("qlearning", {"reward": "speed"}, "reward"),
    ("qlearning", {"state_len": 5}, "state_len"),
    ("hf_heuristic", {"transient": "yes"}, "transient"),
    ("fixed", {"gamma": -2}, "gamma"),
    ("fixed", {"acc_history": 2}, "unknown parameter"),
])
def test_factory_errors_name_the_key_and_range(name, kwargs, key):
    with pytest.raises(ConfigError, match=key):
        make_gamma_policy(name, **kwargs)


def test_gamma_init_is_the_decoders_gamma_clipped_into_the_range():
    assert make_gamma_policy("fsm", gamma_min=6, gamma_max=7).next_gamma() == 6
    assert make_gamma_policy("fsm", gamma_min=1, gamma_max=2).next_gamma() == 2
    assert make_gamma_policy("fsm", gamma=3).next_gamma() == 3
    assert POLICIES.get("fsm")(gamma_max=6).build(gamma=5, depth_cap=2).next_gamma() == 2  # a tree's depth caps it


@pytest.mark.parametrize("name", [n for n in POLICIES.all() if n != "fixed"])
@pytest.mark.parametrize("gmin,gmax", [(1, 8), (0, 3), (2, 5)])
def test_policies_never_leave_the_range(name, gmin, gmax):
    rng = random.Random(0)
    policy = make_gamma_policy(name, gamma=gmin, gamma_min=gmin, gamma_max=gmax)
    for beta in (0.05, 0.5, 0.97):
        gammas = simulate_rounds(policy, 300, beta, a_q=0.2, b_p=lambda g: 1 + 0.1 * g, rng=rng,
                                 rounds_per_generation=40, time_noise=0.3)
        assert all(gmin <= g <= gmax for g in gammas), (name, beta, set(gammas))


# ---------------------------------------------------------------- fsm, cache_fsm, hf_heuristic: as written

def test_fsm_transitions():
    p = make_gamma_policy("fsm", gamma=3, gamma_min=0, gamma_max=5)
    p.reset([0])
    seq = []
    for o in [obs(3, 3), obs(4, 4), obs(5, 5), obs(5, 5), obs(5, 2), obs(4, 0), obs(3, 0), obs(2, 0), obs(1, 0),
              obs(0, 0)]:
        p.observe(o)
        seq.append(p.next_gamma())
    assert seq == [4, 5, 5, 5, 4, 3, 2, 1, 0, 1]  # +1 full, −1 rejected, saturating; γ = 0 probes back to 1
    p.reset([0])
    assert p.next_gamma() == 3


def test_cache_fsm_transitions():
    p = make_gamma_policy("cache_fsm", gamma=4, gamma_min=1, gamma_max=8)
    p.reset([10, 11, 12])
    p.observe(obs(4, 4, committed=[10, 50, 51, 52, 53]))   # a cached token and all accepted: +2
    assert p.next_gamma() == 6
    p.observe(obs(6, 1, committed=[60, 61]))               # nothing cached, rejected: −1
    assert p.next_gamma() == 5
    p.observe(obs(5, 5, committed=[70, 71, 72, 73, 74, 75]))  # nothing cached but all accepted: −1 + 1
    assert p.next_gamma() == 5
    p.observe(obs(5, 0, committed=[61]))                   # 61 was validated two rounds ago: +1
    assert p.next_gamma() == 6
    p.observe(obs(6, 6, committed=[10, 11, 12, 50, 51, 52, 53]))
    assert p.next_gamma() == 8                              # saturates at γ_max
    p.reset([99])                                           # a new generation: new cache, γ_init
    assert p.next_gamma() == 4 and p.cache == {99}


def test_hf_heuristic_transitions_match_transformers():
    p = make_gamma_policy("hf_heuristic", gamma=4, gamma_min=1, gamma_max=20)
    p.reset([0])
    seq = []
    for o in [obs(4, 4), obs(6, 6), obs(8, 2), obs(7, 0), obs(6, 6), obs(8, 7)]:
        p.observe(o)
        seq.append(p.next_gamma())
    assert seq == [6, 8, 7, 6, 8, 7]
    p.observe(obs(3, 3))  # the loop clipped the round to 3 drafts at the end: all 3 matched → +2 (HF compares
    assert p.next_gamma() == 9  # num_matches with the candidates actually drafted)
    for _ in range(20):
        p.observe(obs(1, 0))
    assert p.next_gamma() == 1  # HF's floor max(1, n − 1)
    p.reset([0])
    assert p.next_gamma() == 1  # "heuristic" persists across generations ...
    q = make_gamma_policy("hf_heuristic", gamma=4, transient=True)
    q.observe(obs(4, 0))
    q.reset([0])
    assert q.next_gamma() == 4  # ... "heuristic_transient" restarts


def test_hf_heuristic_saturates_at_gamma_max():
    p = make_gamma_policy("hf_heuristic", gamma=7, gamma_min=1, gamma_max=8)
    p.observe(obs(7, 7))
    assert p.next_gamma() == 8


# ---------------------------------------------------------------- online

@pytest.mark.parametrize("acc,a_q,b0,b1", [(0.5, 0.3, 1.0, 0.0), (0.8, 0.1, 1.0, 0.05), (0.9, 0.05, 1.0, 0.3),
                                           (0.7, 0.17, 1.0, 0.02), (0.95, 0.02, 1.0, 0.0)])
def test_online_picks_the_gamma_maximising_the_true_objective(acc, a_q, b0, b1):
    """Exact times and a long history: the estimates converge and γ is Eq. 1's argmax for the true values."""
    b_p = lambda g: b0 + b1 * g  # noqa: E731
    policy = make_gamma_policy("online", gamma_min=1, gamma_max=10, acc_history=2000, acc_max=0.99, time_window=64)
    rng = random.Random(7)
    gammas = simulate_rounds(policy, 2000, acc, a_q, b_p, rng)
    truth = objective_argmax(acc, a_q, b_p, 1, 10)
    assert policy.last_estimates["a_q"] == pytest.approx(a_q)
    assert policy.last_estimates["b0"] + policy.last_estimates["b1"] * truth == pytest.approx(b_p(truth), rel=1e-3)
    assert policy.last_estimates["acc"] == pytest.approx(acc, abs=0.02)
    assert policy.next_gamma() == truth
    assert gammas[-200:].count(truth) > 150


@pytest.mark.parametrize("estimator", ["eq2", "mle"])
def test_online_follows_a_changing_context(estimator):
    """Acc from the last h rounds: γ rises when drafts start being accepted and falls when they stop."""
    policy = make_gamma_policy("online", gamma_min=1, gamma_max=8, acc_history=6, acc_estimator=estimator)
    beta = lambda r: 0.95 if (r // 200) % 2 else 0.1  # noqa: E731
    gammas = simulate_rounds(policy, 800, beta, 0.1, lambda g: 1.0, random.Random(3))
    low = [g for r, g in enumerate(gammas) if (r // 200) % 2 == 0 and r % 200 > 20]
    high = [g for r, g in enumerate(gammas) if (r // 200) % 2 == 1 and r % 200 > 20]
    assert sum(high) / len(high) > sum(low) / len(low) + 2


def test_online_uses_gamma_init_until_it_can_estimate_and_skips_prefill_times():
    policy = make_gamma_policy("online", gamma=3)
    policy.reset([1, 2])
    assert policy.next_gamma() == 3
    policy.observe(obs(3, 2, draft=0.3, verify=50.0))  # first round: prefill, its times are not used
    assert policy.next_gamma() == 3                      # Acc known, no timing yet
    assert math.isnan(policy.costs()[0])
    policy.observe(obs(3, 2, draft=0.3, verify=1.0))
    policy.next_gamma()
    assert policy.costs()[0] == pytest.approx(0.1) and policy.costs()[1] == pytest.approx(1.0)
    policy.reset([5])  # a new generation: Acc history restarts, pooled Acc of the cell stands in
    assert policy.accuracy() == pytest.approx(4 / 6)


def test_online_ignores_unmeasured_times():
    policy = make_gamma_policy("online", gamma=5)
    policy.reset([0])
    for _ in range(5):
        policy.observe(obs(5, 5))
    assert policy.next_gamma() == 5  # NaN times: no a_q, b_p — stays at γ_init


# ---------------------------------------------------------------- qlearning

def test_qlearning_prefers_the_best_gamma_for_its_reward():
    """Paper's reward (fraction accepted) is largest at the smallest γ for any stationary β
    (E[V]/γ is a running mean of a decreasing sequence): the agent must learn to stay low."""
    policy = QLearningPolicy(QLearningParams(gamma_min=1, gamma_max=6), 4, seed=1)
    rng = random.Random(1)
    for _ in range(60):
        simulate_rounds(policy, 40, 0.6, 0.1, lambda g: 1.0, rng)
    assert not policy.warming_up
    picks = simulate_rounds(policy, 400, 0.6, 0.1, lambda g: 1.0, rng)
    reward = lambda g: (est.expected_tokens(0.6, g) - 1) / g  # noqa: E731
    assert picks.count(1) / len(picks) > 0.6
    assert sum(reward(g) for g in picks) / len(picks) > 0.9 * reward(1)


def test_qlearning_with_throughput_reward_learns_a_near_best_gamma():
    """Reward = tokens per second of the round: the agent's picks reach > 93 % of Eq. 1's best
    value (the objective is flat near its optimum, so neighbours of the argmax are as good)."""
    a_q, b_p, beta = 0.3, (lambda g: 1.0), 0.9
    truth = objective_argmax(beta, a_q, b_p, 1, 8)
    policy = QLearningPolicy(QLearningParams(gamma_min=1, gamma_max=8, reward="throughput"), 4, seed=2)
    rng = random.Random(2)
    for _ in range(100):
        simulate_rounds(policy, 40, beta, a_q, b_p, rng)
    picks = simulate_rounds(policy, 400, beta, a_q, b_p, rng)
    value = sum(est.objective(beta, g, a_q, b_p) for g in picks) / len(picks)
    worst_edge = min(est.objective(beta, g, a_q, b_p) for g in (1, 8))
    assert truth not in (1, 8)
    assert value > 0.93 * est.objective(beta, truth, a_q, b_p) > worst_edge


def test_qlearning_warmup_counts_generations():
    policy = make_gamma_policy("qlearning", warmup_trials=2)
    assert policy.warmup_generations() == 2  # the runner runs them unrecorded (adaptive App. C.1)
    flags = []
    for _ in range(4):
        policy.reset([0])
        flags.append(policy.warming_up)
    assert flags == [True, True, False, False]


def test_qlearning_step_is_cheap():
    """Not a timing assertion: a sanity bound 100× above the measured cost (scripts/bench_gamma_policies.py)."""
    policy = make_gamma_policy("qlearning", state_len=2)
    policy.reset([0])
    t = time.perf_counter()
    for _ in range(1000):
        g = policy.next_gamma()
        policy.observe(obs(g, g // 2))
    assert (time.perf_counter() - t) / 1000 < 1e-3
