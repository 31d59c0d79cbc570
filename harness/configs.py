"""Structured configs: every decoder's ``Params`` and the decoding presets, registered in Hydra's ConfigStore.

The ``method`` config group has one node per registered decoder, generated from its Params dataclass
(field types, defaults and ``help``), so Hydra itself validates ``method.<key>`` overrides: an unknown
key or a value of the wrong type fails before anything runs. The warp (temperature, top_k, top_p) is
not a method key: it comes from the ``decoding`` group (:mod:`harness.decoding`), whose presets are
registered here too. ``conf/method/*.yaml`` holds only the aliases ``ar`` and ``beam``. Deprecated
names (``Params.renamed``, ``Params.retired``, and ``method.temperature``/``top_k``/``top_p``) stay in
the schema as optional keys for one release; the runner maps them with a logged message.
"""
from __future__ import annotations

import dataclasses
import typing
from typing import Any, Optional

from hydra.core.config_store import ConfigStore

from harness import schema
from harness.decoders.base import Decoder, registry
from harness.decoding import PRESETS, WARP_KEYS, Decoding
from harness.energy.config import register_energy_schema
from harness.energy.hardware import register_gpu_schema
from harness.sweeper import register_sweeper

METHOD_GROUP = "method"
DECODING_GROUP = "decoding"
_REGISTERED = False


def method_schema(cls: type[Decoder]) -> type:
    """A Hydra structured-config dataclass for ``cls``: ``name`` (the method) plus its Params fields."""
    hints = typing.get_type_hints(cls.Params)
    fields: list[tuple[str, Any, Any]] = [
        ("name", str, dataclasses.field(default=cls.method, metadata={"help": "the decoder (registered method name)"}))]
    deprecated: dict[str, tuple[Any, str]] = {}
    for f in dataclasses.fields(cls.Params):
        if f.name in WARP_KEYS:
            deprecated[f.name] = (hints[f.name], f"deprecated: set decoding.{f.name} (accepted for one release)")
        else:
            fields.append((f.name, hints[f.name], dataclasses.field(default=f.default, metadata=dict(f.metadata))))
    for old, new in getattr(cls.Params, "renamed", {}).items():
        deprecated[old] = (hints[new], f"deprecated name of '{new}' (accepted for one release)")
    for old, kind in getattr(cls.Params, "retired", {}).items():
        deprecated[old] = (kind, "deprecated (accepted for one release)")
    for name, (kind, help_text) in deprecated.items():
        fields.append((name, Optional[kind], dataclasses.field(default=None, metadata={"help": help_text})))
    return dataclasses.make_dataclass(f"{cls.__name__}Config", fields)


def decoding_schema(preset: Decoding) -> type:
    """A structured-config dataclass for one decoding preset (its values as the defaults)."""
    hints = typing.get_type_hints(Decoding)
    fields = [(f.name, hints[f.name], dataclasses.field(default=getattr(preset, f.name), metadata=dict(f.metadata)))
              for f in dataclasses.fields(Decoding)]
    return dataclasses.make_dataclass(f"Decoding_{preset.name}", fields)


def register_configs() -> None:
    """Store a ``method/<name>`` node for every registered decoder and a ``decoding/<name>`` node for every
    decoding preset (idempotent)."""
    global _REGISTERED
    if _REGISTERED:
        return
    cs = ConfigStore.instance()
    for name, cls in sorted(registry().items()):
        cs.store(group=METHOD_GROUP, name=name, node=method_schema(cls))
    for name, preset in PRESETS.items():
        cs.store(group=DECODING_GROUP, name=name, node=decoding_schema(preset))
    schema.register(cs)  # the primary config's typed keys (harness/schema.py)
    register_energy_schema(cs)  # energy/protocol: EnergyConfig, the defaults (naive extends them)
    register_gpu_schema(cs)  # schema/gpu: GpuProfile, the schema every conf/gpu preset conforms to
    from harness.judge.config import register_judge_configs

    register_judge_configs(cs)  # judge=none | openai | hf (harness.judge)
    register_sweeper()  # hydra/sweeper=grids, the experiments' sweeper (conf/experiment/*.yaml)
    _REGISTERED = True
