"""γ policies of seed 004 §4 (and HF's heuristic schedule), behind the γ-policy seam.

Each policy is a small class implementing :class:`~harness.primitives.gamma_policy.GammaPolicy`:
``reset(prompt_ids)`` when a generation starts, ``next_gamma()`` before a round, ``observe(obs)``
after it. A policy sees only the past and always returns γ within [γ_min, γ_max]; the loop clips
γ to the tokens still needed and reports the γ it drafted in ``obs.gamma``.

=============  =====================================================================  ==============
name           what                                                                   seed 004
=============  =====================================================================  ==============
fixed          γ every round (today's behaviour; :class:`FixedGamma`)                 Alg. 1
online         maximise Eq. 1 over γ with a_q, b_p(γ) from measured times and Acc     §4.1, Eq. 1-2,
               by Eq. 2 (capped at Acc_max) or the exact MLE of App. B.2               App. B.1-B.3
fsm            saturating counter: +1 after a fully accepted round, −1 after a        §4.2
               rejection
cache_fsm      token cache seeded with the prompt: ±1 on whether the round's          §4.2
               validated tokens were already in the cache, +1 more when all accepted
qlearning      tabular Q-learning; state = previous γ values, action = next γ,        §4.2, Alg. 2
               reward = fraction of drafted tokens accepted; 25 warm-up trials         (App. B.4, C.1)
hf_heuristic   HF transformers' ``num_assistant_tokens_schedule="heuristic"``: +2      (peer baseline)
               after a fully accepted round, −1 otherwise
=============  =====================================================================  ==============

Shared defaults (one value everywhere): γ_min = 1, γ_max = 8 (the top of App. C.5 Table 10's
γ_max ∈ 5..8), γ_init = 4 (SD's γ, seed 002 Table 15). The seed's FSM may fall to γ = 0 (one
plain target step): set ``gamma_min=0``. ``online``: h = 6 (Table 10: best in 2 of its 3
datasets); Acc_max = 0.95 and the 32-round timing window are not given in the seed (our choice:
the cap bounds expected tokens per round at 20, beyond γ_max + 1 = 9, so it only guards 1/(1 − Acc)).
:func:`make_gamma_policy` builds a policy from a name and keyword parameters and checks them.
"""
from __future__ import annotations

import inspect
import math
import random
from collections import deque
from typing import ClassVar

from harness.adaptive import estimators as est
from harness.errors import ConfigError
from harness.primitives.gamma_policy import FixedGamma, GammaPolicy, RoundObservation

GAMMA_MIN, GAMMA_MAX, GAMMA_INIT = 1, 8, 4
GAMMA_LIMIT = 64  # the largest γ_max accepted (a sanity bound, far above any useful draft depth)


class BoundedPolicy(GammaPolicy):
    """Base of the adaptive policies: the γ range, the initial γ, and clipping.

    ``needs_timing``: the policy reads ``draft_time_s``/``verify_time_s``, so the loop must
    measure them (device-synchronised) when this policy drives it.
    """

    name: ClassVar[str] = ""
    needs_timing: ClassVar[bool] = False

    def __init__(self, gamma_min: int = GAMMA_MIN, gamma_max: int = GAMMA_MAX, gamma_init: int = GAMMA_INIT):
        self.gamma_min, self.gamma_max, self.gamma_init = int(gamma_min), int(gamma_max), int(gamma_init)
        self.gamma = self.gamma_init

    def clip(self, gamma: int) -> int:
        return max(self.gamma_min, min(self.gamma_max, int(gamma)))

    def reset(self, prompt_ids: list[int]) -> None:
        self.gamma = self.gamma_init

    def next_gamma(self) -> int:
        return self.gamma

    def observe(self, obs: RoundObservation) -> None:
        pass

    def describe(self) -> dict:
        """The policy's name and parameters, for result summaries."""
        return {"gamma_policy": self.name, **{k: v for k, v in vars(self).items() if k in self.params()}}

    @classmethod
    def params(cls) -> tuple[str, ...]:
        return ("gamma_min", "gamma_max", "gamma_init")


class OnlinePolicy(BoundedPolicy):
    """Online window-size optimisation (seed 004 §4.1).

    Before each round: a_q = Σ draft time ÷ Σ γ over the last ``time_window`` rounds (the draft
    cost of one depth level); b_p(γ) = b0 + b1 γ, a least-squares line over the same rounds'
    (γ_j, verification time_j) (:func:`~harness.adaptive.estimators.fit_verify_cost`); Acc over
    the last ``h`` rounds of this generation by Eq. 2 capped at Acc_max (``estimator="eq2"``) or
    by the exact MLE of App. B.2, Eq. 12 (``estimator="mle"``, also capped); then γ = argmax of
    Eq. 1 over [γ_min, γ_max].

    Times are kept across the generations of a cell (they describe the hardware); the first
    round of each generation is left out of them (it prefills the prompt in both models). The
    Acc history restarts with each generation (§4.1: locality); until this generation has a
    round, Acc is the pooled Eq. 2 estimate over the cell's earlier rounds. γ_init is used while
    there is no Acc or no timing yet. Rounds with unmeasured (NaN) times add nothing to a_q, b_p.
    """

    name = "online"
    needs_timing = True

    def __init__(self, gamma_min: int = GAMMA_MIN, gamma_max: int = GAMMA_MAX, gamma_init: int = GAMMA_INIT,
                 h: int = 6, acc_max: float = 0.95, estimator: str = "eq2", time_window: int = 32):
        super().__init__(gamma_min, gamma_max, gamma_init)
        self.h, self.acc_max, self.estimator, self.time_window = int(h), float(acc_max), estimator, int(time_window)
        self._acc: deque = deque(maxlen=self.h)                  # (accepted, γ) of this generation
        self._times: deque = deque(maxlen=self.time_window)      # (γ, draft s, verify s), cell-wide
        self._pooled = [0, 0]                                    # Σ V, Σ 1(V < γ) over the cell
        self._first_round = True
        self.last_estimates: dict = {}

    @classmethod
    def params(cls):
        return super().params() + ("h", "acc_max", "estimator", "time_window")

    def reset(self, prompt_ids: list[int]) -> None:
        super().reset(prompt_ids)
        self._acc.clear()
        self._first_round = True

    def accuracy(self) -> float:
        """Acĉ of the recent rounds (Eq. 2 or App. B.2's MLE), capped at Acc_max; NaN if unknown."""
        if self._acc:
            acc = [a for a, _ in self._acc]
            gam = [g for _, g in self._acc]
            if self.estimator == "mle":
                value = est.acc_mle_truncated([a + 1 for a in acc], gam, self.acc_max)
            else:
                value = est.acc_eq2(acc, gam, self.acc_max)
            if not math.isnan(value):
                return value
        v, r = self._pooled
        return min(v / (v + r), self.acc_max) if v + r else math.nan

    def costs(self) -> tuple[float, float, float]:
        """(a_q, b0, b1) from the recent measured rounds; NaN while there are none."""
        rows = [(g, d, v) for g, d, v in self._times if g > 0 and math.isfinite(d) and math.isfinite(v)]
        if not rows:
            return math.nan, math.nan, math.nan
        a_q = sum(d for _, d, _ in rows) / sum(g for g, _, _ in rows)
        b0, b1 = est.fit_verify_cost([g for g, _, _ in rows], [v for _, _, v in rows])
        return a_q, b0, b1

    def next_gamma(self) -> int:
        acc = self.accuracy()
        a_q, b0, b1 = self.costs()
        self.last_estimates = {"acc": acc, "a_q": a_q, "b0": b0, "b1": b1}
        if math.isnan(acc) or math.isnan(a_q):
            return self.clip(self.gamma_init)
        self.gamma = est.best_gamma(acc, a_q, lambda g: b0 + b1 * g, self.gamma_min, self.gamma_max)
        return self.gamma

    def observe(self, obs: RoundObservation) -> None:
        if obs.gamma > 0:
            self._acc.append((obs.accepted, obs.gamma))
            self._pooled[0] += obs.accepted
            self._pooled[1] += int(obs.accepted < obs.gamma)
        if not self._first_round:
            self._times.append((obs.gamma, obs.draft_time_s, obs.verify_time_s))
        self._first_round = False


class FSMPolicy(BoundedPolicy):
    """FSM-based speculation (seed 004 §4.2): an n-bit saturating counter on γ.

    γ − 1 when a draft token was rejected, γ + 1 when all were accepted, saturating at
    [γ_min, γ_max]. A γ = 0 round (possible with ``gamma_min=0``) drafted nothing, so it counts
    as fully accepted and the next round probes γ = 1. Restarts at γ_init every generation.
    """

    name = "fsm"

    def observe(self, obs: RoundObservation) -> None:
        self.gamma = self.clip(self.gamma + (1 if obs.accepted >= obs.gamma else -1))


class CacheFSMPolicy(BoundedPolicy):
    """Cache-enabled FSM-based speculation (seed 004 §4.2).

    A token cache is seeded with the prompt's tokens (``reset``) and, after every round, updated
    with the round's validated tokens (``obs.committed``: the accepted drafts and the target's
    token). γ then moves by: +1 if a validated token of this round was already in the cache
    (looked up before this round's update), −1 if none was; and +1 more when all γ drafts were
    accepted. Saturates at [γ_min, γ_max]; restarts at γ_init every generation.
    """

    name = "cache_fsm"

    def __init__(self, gamma_min: int = GAMMA_MIN, gamma_max: int = GAMMA_MAX, gamma_init: int = GAMMA_INIT):
        super().__init__(gamma_min, gamma_max, gamma_init)
        self.cache: set[int] = set()

    def reset(self, prompt_ids: list[int]) -> None:
        super().reset(prompt_ids)
        self.cache = {int(t) for t in prompt_ids}

    def observe(self, obs: RoundObservation) -> None:
        hit = any(t in self.cache for t in obs.committed)
        delta = (1 if hit else -1) + (1 if obs.accepted >= obs.gamma else 0)
        self.cache.update(obs.committed)
        self.gamma = self.clip(self.gamma + delta)


class QLearningPolicy(BoundedPolicy):
    """Reinforcement-learning-based speculation (seed 004 §4.2, App. B.4 Alg. 2).

    Tabular Q-learning. State: the last ``state_len`` γ values; action: the next γ (any value
    in [γ_min, γ_max]), chosen ε-greedily (Alg. 2 line 16, GetAction); reward after the round
    (line 18): the fraction of drafted tokens accepted, accepted ÷ γ (``reward="acceptance"``;
    0 for a γ = 0 round). ``reward="throughput"`` (not in the seed) rewards tokens committed per
    second of the round instead, normalised by its running mean, so the agent optimises what
    §6.3 says the acceptance reward misses. Update: Q(s,a) += η (r + discount max Q(s',·) − Q(s,a)),
    η = max(lr, 1/N(s,a)) (a sample average over the first visits, then a constant rate).

    The Q-table lives across the generations of a cell; App. C.1 runs 25 warm-up trials
    (generations) before measuring: the first ``warmup_trials`` generations explore with
    ``epsilon_warmup``, later ones with ``epsilon``. :attr:`warming_up` tells the runner which
    generations are warm-up. Q starts optimistic (``q_init`` = 1, the largest acceptance reward),
    so each action is tried. Learning-rate, discount and ε values are not given in the seed.
    Pure Python lists: well under a millisecond per round (scripts/bench_gamma_policies.py).
    """

    name = "qlearning"

    def __init__(self, gamma_min: int = GAMMA_MIN, gamma_max: int = GAMMA_MAX, gamma_init: int = GAMMA_INIT,
                 state_len: int = 1, lr: float = 0.05, discount: float = 0.2, epsilon: float = 0.05,
                 epsilon_warmup: float = 0.3, warmup_trials: int = 25, reward: str = "acceptance",
                 q_init: float = 1.0, seed: int = 0):
        super().__init__(gamma_min, gamma_max, gamma_init)
        self.state_len, self.lr, self.discount = int(state_len), float(lr), float(discount)
        self.epsilon, self.epsilon_warmup, self.warmup_trials = float(epsilon), float(epsilon_warmup), int(warmup_trials)
        self.reward, self.q_init, self.seed = reward, float(q_init), int(seed)
        self.n_actions = self.gamma_max - self.gamma_min + 1
        self.q = [[self.q_init] * self.n_actions for _ in range(self.n_actions ** self.state_len)]
        self.visits = [[0] * self.n_actions for _ in range(self.n_actions ** self.state_len)]
        self.rng = random.Random(self.seed)
        self.trials = 0
        self._history: list[int] = []
        self._state = 0
        self._action = 0
        self._rate_mean = math.nan
        self._first_round = True

    @classmethod
    def params(cls):
        return super().params() + ("state_len", "lr", "discount", "epsilon", "epsilon_warmup", "warmup_trials",
                                   "reward", "q_init", "seed")

    @property
    def warming_up(self) -> bool:
        """True during the first ``warmup_trials`` generations (App. C.1: not to be recorded)."""
        return self.trials <= self.warmup_trials

    def _encode(self, history: list[int]) -> int:
        s = 0
        for g in history:
            s = s * self.n_actions + (g - self.gamma_min)
        return s

    def reset(self, prompt_ids: list[int]) -> None:
        super().reset(prompt_ids)
        self.trials += 1
        self._history = [self.clip(self.gamma_init)] * self.state_len
        self._state = self._encode(self._history)
        self._first_round = True

    def next_gamma(self) -> int:
        eps = self.epsilon_warmup if self.warming_up else self.epsilon
        row = self.q[self._state]
        if self.rng.random() < eps:
            a = self.rng.randrange(self.n_actions)
        else:
            best = max(row)
            a = row.index(best)
        self._action = a
        self.gamma = a + self.gamma_min
        return self.gamma

    def _reward(self, obs: RoundObservation) -> float | None:
        if self.reward == "acceptance":
            return obs.accepted / obs.gamma if obs.gamma > 0 else 0.0
        seconds = obs.draft_time_s + obs.verify_time_s
        if self._first_round or not (seconds > 0):  # prefill round, or unmeasured: no reward
            return None
        rate = len(obs.committed) / seconds
        self._rate_mean = rate if math.isnan(self._rate_mean) else 0.95 * self._rate_mean + 0.05 * rate
        return rate / self._rate_mean

    def observe(self, obs: RoundObservation) -> None:
        r = self._reward(obs)
        self._first_round = False
        nxt_hist = self._history[1:] + [self._action + self.gamma_min]
        nxt = self._encode(nxt_hist)
        if r is not None:
            row, seen = self.q[self._state], self.visits[self._state]
            seen[self._action] += 1
            step = max(self.lr, 1.0 / seen[self._action])  # sample average first, then a constant rate
            row[self._action] += step * (r + self.discount * max(self.q[nxt]) - row[self._action])
        self._history, self._state = nxt_hist, nxt

    def preferred_gamma(self, history: list[int] | None = None) -> int:
        """The greedy γ in a state (default: the current one)."""
        row = self.q[self._encode(history) if history is not None else self._state]
        return row.index(max(row)) + self.gamma_min


class HFHeuristicPolicy(BoundedPolicy):
    """HF transformers' ``num_assistant_tokens_schedule="heuristic"`` as a γ policy.

    Checked against ``AssistedCandidateGenerator.update_candidate_strategy`` in
    ``transformers/generation/candidate_generator.py`` of transformers 5.23.0: after a round,
    if the number of matches equals the number of candidates drafted, ``num_assistant_tokens``
    += 2, else ``num_assistant_tokens = max(1, num_assistant_tokens − 1)``. With "heuristic" the
    value persists across ``generate`` calls (it is written back to the assistant's generation
    config); "heuristic_transient" restarts from the initial value each call (``transient=True``).

    Differences, by design: HF has no upper bound (only the remaining length clips a round);
    here γ saturates at γ_max (a large ``gamma_max`` reproduces HF) and at γ_min (HF's floor is 1,
    our default γ_min). ``gamma_init`` (4, as our ``hf_assisted``'s ``gamma``) stands for
    ``num_assistant_tokens`` (HF 5.x default 20, schedule "constant").
    """

    name = "hf_heuristic"

    def __init__(self, gamma_min: int = GAMMA_MIN, gamma_max: int = GAMMA_MAX, gamma_init: int = GAMMA_INIT,
                 transient: bool = False):
        super().__init__(gamma_min, gamma_max, gamma_init)
        self.transient = bool(transient)

    @classmethod
    def params(cls):
        return super().params() + ("transient",)

    def reset(self, prompt_ids: list[int]) -> None:
        if self.transient:
            super().reset(prompt_ids)

    def observe(self, obs: RoundObservation) -> None:
        self.gamma = self.clip(self.gamma + 2 if obs.accepted >= obs.gamma else self.gamma - 1)


class FixedPolicy(FixedGamma):
    """``fixed``: :class:`~harness.primitives.gamma_policy.FixedGamma` with a name and a describe()."""

    name = "fixed"
    needs_timing = False

    def describe(self) -> dict:
        return {"gamma_policy": self.name, "gamma": self.gamma}


POLICIES: dict[str, type] = {cls.name: cls for cls in (FixedPolicy, OnlinePolicy, FSMPolicy, CacheFSMPolicy,
                                                        QLearningPolicy, HFHeuristicPolicy)}
ESTIMATORS = ("eq2", "mle")
REWARDS = ("acceptance", "throughput")


def _check(policy: str, key: str, value, ok: bool, valid: str) -> None:
    if not ok:
        raise ConfigError(f"gamma policy '{policy}': {key} = {value!r} is out of range; valid: {valid}")


def make_gamma_policy(name: str = "fixed", **kwargs) -> GammaPolicy:
    """Build a γ policy by name, checking every parameter (a clear error names the key and range).

    ``make_gamma_policy("fixed", gamma=4)`` · ``make_gamma_policy("online", gamma_max=6, h=6)`` ·
    ``make_gamma_policy("qlearning", reward="throughput")``. Valid names: :data:`POLICIES`.
    """
    if name not in POLICIES:
        raise ConfigError(f"unknown gamma policy '{name}'; valid: {', '.join(POLICIES)}")
    if name == "fixed":
        unknown = sorted(set(kwargs) - {"gamma"})
        if unknown:
            raise ConfigError(f"unknown parameter(s) {unknown} for gamma policy 'fixed'; valid: gamma")
        gamma = kwargs.get("gamma", GAMMA_INIT)
        _check(name, "gamma", gamma, isinstance(gamma, int) and 0 <= gamma <= GAMMA_LIMIT, f"an integer in [0, {GAMMA_LIMIT}]")
        return FixedPolicy(gamma)
    cls = POLICIES[name]
    valid = cls.params()
    unknown = sorted(set(kwargs) - set(valid))
    if unknown:
        raise ConfigError(f"unknown parameter(s) {unknown} for gamma policy '{name}'; valid: {', '.join(valid)}")
    p = dict(kwargs)
    defaults = {k: v.default for k, v in inspect.signature(cls).parameters.items()}

    def get(key):
        return p.get(key, defaults[key])
    lo, hi = get("gamma_min"), get("gamma_max")
    init = p.get("gamma_init", min(max(GAMMA_INIT, lo), hi) if isinstance(lo, int) and isinstance(hi, int) else GAMMA_INIT)
    for key, v in (("gamma_min", lo), ("gamma_max", hi), ("gamma_init", init)):
        _check(name, key, v, isinstance(v, int) and not isinstance(v, bool), "an integer")
    _check(name, "gamma_min", lo, 0 <= lo <= GAMMA_LIMIT, f"[0, {GAMMA_LIMIT}]")
    _check(name, "gamma_max", hi, max(lo, 1) <= hi <= GAMMA_LIMIT, f"[max(gamma_min, 1) = {max(lo, 1)}, {GAMMA_LIMIT}]")
    _check(name, "gamma_init", init, lo <= init <= hi, f"[gamma_min, gamma_max] = [{lo}, {hi}]")
    p.update(gamma_min=lo, gamma_max=hi, gamma_init=init)
    if name == "online":
        h = get("h")
        _check(name, "h", h, isinstance(h, int) and h >= 1, "an integer >= 1 (rounds of history)")
        a = get("acc_max")
        _check(name, "acc_max", a, isinstance(a, (int, float)) and 0 < a < 1, "0 < acc_max < 1")
        e = get("estimator")
        _check(name, "estimator", e, e in ESTIMATORS, " | ".join(ESTIMATORS))
        w = get("time_window")
        _check(name, "time_window", w, isinstance(w, int) and w >= 2, "an integer >= 2 (rounds)")
    if name == "qlearning":
        s = get("state_len")
        _check(name, "state_len", s, isinstance(s, int) and s >= 1 and (hi - lo + 1) ** s <= 4096,
               f"an integer >= 1 with (gamma_max - gamma_min + 1) ** state_len <= 4096")
        for key, ok, valid_txt in (("lr", lambda v: 0 < v <= 1, "0 < lr <= 1"),
                                   ("discount", lambda v: 0 <= v < 1, "0 <= discount < 1"),
                                   ("epsilon", lambda v: 0 <= v <= 1, "[0, 1]"),
                                   ("epsilon_warmup", lambda v: 0 <= v <= 1, "[0, 1]"),
                                   ("q_init", lambda v: math.isfinite(v), "a finite number")):
            v = get(key)
            _check(name, key, v, isinstance(v, (int, float)) and not isinstance(v, bool) and ok(v), valid_txt)
        wt = get("warmup_trials")
        _check(name, "warmup_trials", wt, isinstance(wt, int) and wt >= 0, "an integer >= 0 (generations)")
        r = get("reward")
        _check(name, "reward", r, r in REWARDS, " | ".join(REWARDS))
    if name == "hf_heuristic":
        t = get("transient")
        _check(name, "transient", t, isinstance(t, bool), "true | false")
    return cls(**p)


def describe_policy(policy: GammaPolicy) -> dict:
    """Name and parameters of any policy (``{"gamma_policy": "custom"}`` for foreign ones)."""
    if hasattr(policy, "describe"):
        return policy.describe()
    if isinstance(policy, FixedGamma):
        return {"gamma_policy": "fixed", "gamma": policy.gamma}
    return {"gamma_policy": type(policy).__name__}
