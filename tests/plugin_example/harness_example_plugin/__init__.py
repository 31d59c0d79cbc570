"""A package that adds a decoder and a γ policy to the harness from outside it (issue 29.5): installed, it declares
entry points (here ../harness_example_plugin-0.1.dist-info/entry_points.txt; in your pyproject.toml:
``[project.entry-points."harness.decoders"] example = "harness_example_plugin:ExampleGreedy"`` and the same under
``"harness.gamma_policies"``). Then ``harness method=example_greedy`` and ``gamma_policy=example_constant`` work."""
from dataclasses import dataclass

from harness.adaptive.policies.base import GAMMA_INIT, PolicyParams
from harness.adaptive.policies.fixed import FixedGamma
from harness.decoders.ar_greedy import ArGreedy
from harness.params import param


class ExampleGreedy(ArGreedy):
    """Greedy decoding under its own name: a decoder subclasses harness.decoders.base.Decoder (here through ArGreedy)."""

    method = "example_greedy"
    in_default_sweep = False  # `make sweep` runs the harness's own methods


@dataclass(frozen=True)
class ExampleParams(PolicyParams):
    """The same γ every round, from this policy's own key (a policy subclasses PolicyParams)."""

    name = "example_constant"
    every: int = param(2, "γ of every round")

    def build(self, gamma: int = GAMMA_INIT, depth_cap: int | None = None) -> FixedGamma:
        return FixedGamma(min(self.every, depth_cap) if depth_cap is not None else self.every)
