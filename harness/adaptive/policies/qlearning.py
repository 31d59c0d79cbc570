"""``qlearning``: reinforcement-learning-based speculation (adaptive §4.2, App. B.4 Alg. 2, App. C.1)."""
from __future__ import annotations

import math
import random
from dataclasses import dataclass

from harness.adaptive.policies.base import BoundedParams, BoundedPolicy, register_policy
from harness.params import is_int, is_number, param
from harness.primitives.round import Round

REWARDS = ("acceptance", "throughput")
Q_INIT = 1.0  # optimistic start: the largest acceptance reward, so each action is tried
SEED = 0  # the exploration's random stream (fixed: a cell's policy is reproducible)


class QLearningPolicy(BoundedPolicy):
    """Tabular Q-learning. State: the last ``state_len`` γ values; action: the next γ (any value in
    [γ_min, γ_max]), chosen ε-greedily (Alg. 2 line 16, GetAction); reward after the round (line 18):
    the fraction of drafted tokens accepted, accepted ÷ γ (``reward=acceptance``; 0 for a γ = 0 round).
    ``reward=throughput`` (not in the paper) rewards tokens committed per second of the round instead,
    normalised by its running mean, so the agent optimises what §6.3 says the acceptance reward misses.
    Update: Q(s,a) += η (r + discount max Q(s',·) − Q(s,a)), η = max(lr, 1/N(s,a)) (a sample average
    over the first visits, then a constant rate).

    The Q-table lives across the generations of a cell; App. C.1 runs 25 warm-up trials (generations)
    before measuring: the first ``warmup_trials`` generations explore with ``epsilon_warmup``, later
    ones with ``epsilon``, and :meth:`warmup_generations` asks the runner to run them unrecorded.
    Pure Python lists: well under a millisecond per round (scripts/bench_gamma_policies.py).
    """

    params: QLearningParams

    def __init__(self, params: QLearningParams, gamma_init: int, q_init: float = Q_INIT, seed: int = SEED):
        super().__init__(params, gamma_init)
        self.n_actions = self.gamma_max - self.gamma_min + 1
        states = self.n_actions ** params.state_len
        self.q = [[float(q_init)] * self.n_actions for _ in range(states)]
        self.visits = [[0] * self.n_actions for _ in range(states)]
        self.rng = random.Random(seed)
        self.trials = 0
        self._history: list[int] = []
        self._state = 0
        self._action = 0
        self._rate_mean = math.nan
        self._first_round = True

    def warmup_generations(self) -> int:
        return self.params.warmup_trials

    @property
    def warming_up(self) -> bool:
        """True during the first ``warmup_trials`` generations (App. C.1: not to be recorded)."""
        return self.trials <= self.params.warmup_trials

    def _encode(self, history: list[int]) -> int:
        s = 0
        for g in history:
            s = s * self.n_actions + (g - self.gamma_min)
        return s

    def reset(self, prompt_ids: list[int]) -> None:
        super().reset(prompt_ids)
        self.trials += 1
        self._history = [self.clip(self.gamma_init)] * self.params.state_len
        self._state = self._encode(self._history)
        self._first_round = True

    def next_gamma(self) -> int:
        eps = self.params.epsilon_warmup if self.warming_up else self.params.epsilon
        row = self.q[self._state]
        if self.rng.random() < eps:
            a = self.rng.randrange(self.n_actions)
        else:
            a = row.index(max(row))
        self._action = a
        self.gamma = a + self.gamma_min
        return self.gamma

    def _reward(self, obs: Round) -> float | None:
        if self.params.reward == "acceptance":
            return obs.accepted / obs.gamma if obs.gamma > 0 else 0.0
        seconds = obs.draft_time_s + obs.verify_time_s
        if self._first_round or not (seconds > 0):  # prefill round, or unmeasured: no reward
            return None
        rate = len(obs.committed) / seconds
        self._rate_mean = rate if math.isnan(self._rate_mean) else 0.95 * self._rate_mean + 0.05 * rate
        return rate / self._rate_mean

    def observe(self, obs: Round) -> None:
        r = self._reward(obs)
        self._first_round = False
        nxt_hist = self._history[1:] + [self._action + self.gamma_min]
        nxt = self._encode(nxt_hist)
        if r is not None:
            row, seen = self.q[self._state], self.visits[self._state]
            seen[self._action] += 1
            step = max(self.params.lr, 1.0 / seen[self._action])  # sample average first, then a constant rate
            row[self._action] += step * (r + self.params.discount * max(self.q[nxt]) - row[self._action])
        self._history, self._state = nxt_hist, nxt



@register_policy
@dataclass(frozen=True)
class QLearningParams(BoundedParams):
    """Learning rate, discount and ε are not given in the paper (values ours)."""

    name = "qlearning"
    Policy = QLearningPolicy

    state_len: int = param(1, "previous γ values in the state (adaptive App. B.4)")
    lr: float = param(0.05, "learning rate (not in the paper)")
    discount: float = param(0.2, "discount (not in the paper)")
    epsilon: float = param(0.05, "exploration after warm-up (not in the paper)")
    epsilon_warmup: float = param(0.3, "exploration during warm-up (not in the paper)")
    warmup_trials: int = param(25, "warm-up generations, run unrecorded before the first measured prompt "
                                   "(adaptive App. C.1: 25)")
    reward: str = param("acceptance", "acceptance (adaptive Alg. 2 line 18) | throughput (ours)")

    def __post_init__(self):
        super().__post_init__()
        span = self.gamma_max - self.gamma_min + 1
        self.check("state_len", is_int(self.state_len) and self.state_len >= 1 and span ** self.state_len <= 4096,
                   "an integer >= 1 with (gamma_max - gamma_min + 1) ** state_len <= 4096")
        for key, ok, valid in (("lr", lambda v: 0 < v <= 1, "0 < lr <= 1"),
                               ("discount", lambda v: 0 <= v < 1, "0 <= discount < 1"),
                               ("epsilon", lambda v: 0 <= v <= 1, "[0, 1]"),
                               ("epsilon_warmup", lambda v: 0 <= v <= 1, "[0, 1]")):
            value = getattr(self, key)
            self.check(key, is_number(value) and ok(value), valid)
        self.check("warmup_trials", is_int(self.warmup_trials) and self.warmup_trials >= 0,
                   "an integer >= 0 (generations)")
        self.check("reward", self.reward in REWARDS, " | ".join(REWARDS))
