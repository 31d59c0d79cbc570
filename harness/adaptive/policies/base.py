"""The γ-policy contract of the adaptive paper's §4: every policy is a frozen, self-validating Params dataclass
(the ``gamma_policy`` config group: ``gamma_policy=online gamma_policy.acc_history=6``), registered by name,
that builds its runtime :class:`~harness.primitives.gamma_policy.GammaPolicy`.

``gamma`` (the decoder's own draft depth) is the fixed policy's γ and every adaptive policy's γ_init,
clipped into [gamma_min, gamma_max]; a decoder whose round cannot go deeper than its precomputed tree
(``depth_cap``) lowers γ_max to it. One default per key, here: γ_min = 1, γ_max = 8 (the top of the
adaptive paper's App. C.5 Table 10, γ_max ∈ 5..8); γ_init = 4 (SD's γ) where no decoder gives one.
"""
from __future__ import annotations

import dataclasses
from dataclasses import dataclass
from typing import ClassVar

from harness.errors import ConfigError
from harness.params import Params, is_int, param
from harness.primitives.gamma_policy import GammaPolicy
from harness.registry import Registry

GAMMA_MIN, GAMMA_MAX, GAMMA_INIT = 1, 8, 4
GAMMA_LIMIT = 64  # the largest γ_max accepted (a sanity bound, far above any useful draft depth)


@dataclass(frozen=True)
class PolicyParams(Params):
    """Base of a γ policy's parameters; ``name`` is the policy (the config node's name)."""

    name: ClassVar[str] = ""
    #: the policy ends rounds inside the drafting (a per-turn stop hook, SpecDec++): only for methods whose
    #: draft is a chain of the draft model (``supports_draft_stop``)
    stops_drafting: ClassVar[bool] = False

    def describe_group(self) -> str:
        return f"gamma policy '{self.name}':"

    def build(self, gamma: int = GAMMA_INIT, depth_cap: int | None = None) -> GammaPolicy:
        """A fresh runtime policy for a decoder whose own draft depth is ``gamma``."""
        raise NotImplementedError

    def max_gamma(self, gamma: int) -> int:
        """The deepest round this policy asks for when the decoder's own depth is ``gamma``."""
        return gamma


@dataclass(frozen=True)
class BoundedParams(PolicyParams):
    """An adaptive policy: γ moves within [gamma_min, gamma_max]."""

    gamma_min: int = param(GAMMA_MIN, "adaptive γ floor (0 allows a plain target step, adaptive §4.2 FSM)")
    gamma_max: int = param(GAMMA_MAX, "adaptive γ ceiling γ_max (adaptive §6.3, App. C.5 Table 10: 5..8)")

    #: the runtime policy class this Params builds
    Policy: ClassVar[type] = type(None)

    def __post_init__(self):
        lo, hi = self.gamma_min, self.gamma_max
        self.check("gamma_min", is_int(lo) and 0 <= lo <= GAMMA_LIMIT, f"an integer in [0, {GAMMA_LIMIT}]")
        floor = max(lo, 1)
        self.check("gamma_max", is_int(hi) and floor <= hi <= GAMMA_LIMIT,
                   f"an integer in [max(gamma_min, 1) = {floor}, {GAMMA_LIMIT}]")

    def build(self, gamma: int = GAMMA_INIT, depth_cap: int | None = None) -> GammaPolicy:
        params = self
        if depth_cap is not None:
            hi = max(1, min(self.gamma_max, depth_cap))
            params = dataclasses.replace(self, gamma_max=hi, gamma_min=min(self.gamma_min, hi))
        return self.Policy(params, max(params.gamma_min, min(params.gamma_max, int(gamma))))

    def max_gamma(self, gamma: int) -> int:
        return self.gamma_max


class BoundedPolicy(GammaPolicy):
    """Base of the adaptive policies: the γ range of their Params, the initial γ, and clipping."""

    def __init__(self, params: BoundedParams, gamma_init: int):
        self.params = params
        self.gamma_min, self.gamma_max, self.gamma_init = params.gamma_min, params.gamma_max, int(gamma_init)
        self.gamma = self.gamma_init

    @property
    def name(self) -> str:
        return self.params.name

    def clip(self, gamma: int) -> int:
        return max(self.gamma_min, min(self.gamma_max, int(gamma)))

    def reset(self, prompt_ids: list[int]) -> None:
        self.gamma = self.gamma_init

    def next_gamma(self) -> int:
        return self.gamma

    def __repr__(self) -> str:
        return f"{type(self).__name__}({self.params}, gamma_init={self.gamma_init})"


POLICIES: Registry[type[PolicyParams]] = Registry("gamma policy", "name", "harness.adaptive.policies",
                                                  entry_points="harness.gamma_policies", base=PolicyParams)


def register_policy(cls: type[PolicyParams]) -> type[PolicyParams]:
    """Class decorator: register a policy's Params under its ``name``."""
    return POLICIES.register(cls)


def policy_params(name: str, values: dict | None = None) -> PolicyParams:
    """The named policy's Params from config values (ConfigError naming the valid policies or keys)."""
    if name not in POLICIES:
        raise ConfigError(f"unknown gamma policy '{name}'; valid: {', '.join(POLICIES.names())}")
    return POLICIES.get(name).create(dict(values or {}), f"gamma policy '{name}'")


def make_gamma_policy(name: str = "fixed", gamma: int = GAMMA_INIT, **values) -> GammaPolicy:
    """A runtime policy by name, for a decoder whose own depth is ``gamma``: ``make_gamma_policy("online",
    acc_history=6)`` · ``make_gamma_policy("fixed", gamma=3)``."""
    return policy_params(name, values).build(gamma)
