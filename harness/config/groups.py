"""Structured configs: every config group with typed choices, registered in Hydra's ConfigStore from its Params.

* ``method`` — one node per registered decoder, generated from its Params dataclass (field types,
  defaults and ``help``), so Hydra itself validates ``method.<key>`` overrides: an unknown key or a value
  of the wrong type fails before anything runs. The warp (temperature, top_k, top_p) is not a method key:
  it comes from the ``decoding`` group. ``conf/method/*.yaml`` holds only the aliases ``ar`` and ``beam``;
* ``decoding`` — the presets of :mod:`harness.decoding`;
* ``gamma_policy`` — one node per γ policy (:mod:`harness.adaptive.policies`), unset by default (= ``fixed``);
* ``draft_selection`` — ``ols`` (:mod:`harness.selection`), unset by default (none).

Deprecated names of earlier releases are not in any schema: the command line maps them first
(:func:`harness.config.legacy.upgrade_overrides`).
"""
from __future__ import annotations

import dataclasses
import functools
import typing
from typing import Any

from hydra.core.config_store import ConfigStore

from harness.config import schema
from harness.adaptive.policies import POLICIES
from harness.decoders.params import method_params
from harness.config.legacy import old_presets
from harness.decoding import PRESETS, WARP_KEYS, Decoding
from harness.energy.config import register_energy_schema
from harness.energy.hardware import register_gpu_schema
from harness.adaptive.selection_params import SELECTIONS
from harness.run.sweeper import register_sweeper

METHOD_GROUP = "method"
DECODING_GROUP = "decoding"
POLICY_GROUP = "gamma_policy"
SELECTION_GROUP = "draft_selection"
_REGISTERED = False


def params_schema(params_cls: type, name: str, title: str, what: str, skip: tuple[str, ...] = ()) -> type:
    """A Hydra structured-config dataclass: ``name`` (the group's choice) plus the Params fields but ``skip``."""
    hints = typing.get_type_hints(params_cls)
    fields: list[tuple[str, Any, Any]] = [("name", str, dataclasses.field(default=name, metadata={"help": what}))]
    fields += [(f.name, hints[f.name], dataclasses.field(default=f.default, metadata=dict(f.metadata)))
               for f in dataclasses.fields(params_cls) if f.name not in skip]
    return dataclasses.make_dataclass(title, fields)


def method_schema(name: str, params: type) -> type:
    """A Hydra structured-config dataclass for method ``name``: ``name`` plus its Params fields (the warp is the
    decoding's)."""
    return params_schema(params, name, f"Method_{name}", "the decoder (registered method name)", skip=WARP_KEYS)


def methods() -> dict[str, type]:
    """Every method's Params by name, from the torch-free :mod:`harness.decoders.params` (``harness --help`` and
    ``harness ls`` import no decoder); with a plugin installed (an entry point of ``harness.decoders``), from
    the registry itself, which imports every decoder and the plugins' (their Params are known only so)."""
    if not _decoder_plugins():
        return method_params()
    from harness.decoders.base import registry

    return {name: cls.Params for name, cls in registry().items()}


@functools.cache
def _decoder_plugins() -> bool:
    """Whether an installed package declares decoders (entry-point group ``harness.decoders``); asked once."""
    import importlib.metadata

    from harness.registry import ENTRY_POINT_GROUPS

    return bool(importlib.metadata.entry_points(group=ENTRY_POINT_GROUPS[0]))


def decoding_schema(preset: Decoding) -> type:
    """A structured-config dataclass for one decoding preset (its values as the defaults)."""
    hints = typing.get_type_hints(Decoding)
    fields = [(f.name, hints[f.name], dataclasses.field(default=getattr(preset, f.name), metadata=dict(f.metadata)))
              for f in dataclasses.fields(Decoding)]
    return dataclasses.make_dataclass(f"Decoding_{preset.name}", fields)


def register_configs() -> None:
    """Store a node for every decoder (``method``), decoding preset, γ policy and draft selection (idempotent)."""
    global _REGISTERED
    if _REGISTERED:
        return
    cs = ConfigStore.instance()
    for name, params in sorted(methods().items()):
        cs.store(group=METHOD_GROUP, name=name, node=method_schema(name, params))
    for name, preset in {**PRESETS, **old_presets(PRESETS)}.items():  # the deprecated names stay composable
        cs.store(group=DECODING_GROUP, name=name, node=decoding_schema(preset))
    schema.register(cs)  # the primary config's typed keys (harness/config/schema.py)
    for name, cls in sorted(POLICIES.all().items()):
        cs.store(group=POLICY_GROUP, name=name,
                 node=params_schema(cls, name, f"{cls.__name__}Config", "the γ policy (adaptive §4)"))
    for name, cls in SELECTIONS.items():
        cs.store(group=SELECTION_GROUP, name=name,
                 node=params_schema(cls, name, f"Selection_{name}", "the draft selection (adaptive §5)"))
    register_energy_schema(cs)  # energy/protocol: EnergyConfig, the defaults (naive extends them)
    register_gpu_schema(cs)  # gpu_schema: GpuProfile, the schema every conf/gpu preset conforms to
    from harness.judge.config import register_judge_configs

    register_judge_configs(cs)  # judge=none | openai | hf (harness.judge)
    from harness.results.trackers import register_tracker_configs

    register_tracker_configs(cs)  # tracker=none | wandb | mlflow (harness.results.trackers)
    register_sweeper()  # hydra/sweeper=grids, the experiments' sweeper (conf/experiment/*.yaml)
    _REGISTERED = True
