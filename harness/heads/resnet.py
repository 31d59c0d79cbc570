"""The residual MLP block that Medusa's heads and SpecDec++'s acceptance head are built from.

A block maps x to x + SiLU(W x + b). Both reference implementations build a head as
``Sequential(*([block] * num_layers), Linear(hidden, out))``: the *same* block object repeated, so
with ``num_layers > 1`` the layers share one set of weights (FasterDecoding/Medusa
``medusa_model.py``; Kaffaljidhmah2/SpecDec_pp ``wrap_model.py``). :func:`residual_stack` keeps that
sharing, so the state-dict keys (``{j}.linear.weight`` for every j < num_layers, ``{num_layers}.weight``)
and the function computed are the published ones.
"""
from __future__ import annotations

import torch
from torch import nn

from harness.errors import HarnessError


class ResBlock(nn.Module):
    """x + SiLU(Linear(x)); ``zero_init`` starts it as the identity (Medusa's initialisation)."""

    def __init__(self, hidden_size: int, zero_init: bool = False):
        super().__init__()
        self.linear = nn.Linear(hidden_size, hidden_size)
        if zero_init:
            nn.init.zeros_(self.linear.weight)
        self.act = nn.SiLU()

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return x + self.act(self.linear(x))


def residual_stack(hidden_size: int, num_layers: int, out_features: int, bias: bool,
                   zero_init: bool = False) -> nn.Sequential:
    """One :class:`ResBlock` applied ``num_layers`` times (shared weights), then Linear(hidden → out)."""
    if num_layers < 0:
        raise ValueError(f"num_layers must be >= 0, got {num_layers}")
    block = ResBlock(hidden_size, zero_init)
    return nn.Sequential(*([block] * num_layers), nn.Linear(hidden_size, out_features, bias=bias))


def load_residual_stack(stack: nn.Sequential, state: dict[str, torch.Tensor], prefix: str, ref: str) -> None:
    """Load ``stack`` from ``state`` (keys under ``prefix``). A checkpoint saved with shared tensors
    written once (safetensors) may hold only one copy of the shared block: any copy serves, and copies
    that differ are refused (this layout cannot represent unshared layers)."""
    num_layers = len(stack) - 1
    wanted = stack.state_dict()
    filled: dict[str, torch.Tensor] = {}
    for key in wanted:
        head, _, leaf = key.partition(".")
        if int(head) < num_layers:  # a copy of the shared block
            copies = [state[f"{prefix}{j}.{leaf}"] for j in range(num_layers) if f"{prefix}{j}.{leaf}" in state]
            if not copies:
                raise HarnessError(f"head checkpoint '{ref}' lacks {prefix}0.{leaf}")
            if any(not torch.equal(c, copies[0]) for c in copies[1:]):
                raise HarnessError(f"head checkpoint '{ref}': the {num_layers} residual layers under '{prefix}' "
                                   "differ, but this layout shares one block across them")
            filled[key] = copies[0]
        elif f"{prefix}{key}" in state:
            filled[key] = state[f"{prefix}{key}"]
        else:
            raise HarnessError(f"head checkpoint '{ref}' lacks {prefix}{key}")
    stack.load_state_dict(filled, strict=True)


def stack_keys(prefix: str, num_layers: int, bias: bool) -> set[str]:
    """Every key a saved stack may have (each copy of the shared block, the output layer)."""
    keys = {f"{prefix}{j}.linear.{p}" for j in range(num_layers) for p in ("weight", "bias")}
    return keys | {f"{prefix}{num_layers}.weight"} | ({f"{prefix}{num_layers}.bias"} if bias else set())
