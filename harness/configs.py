"""Structured configs: every decoder's ``Params`` registered in Hydra's ConfigStore, from the decoder registry.

The ``method`` config group has one node per registered decoder, generated from its Params dataclass
(field types, defaults and ``help``), so Hydra itself validates ``method.<key>`` overrides: an unknown
key or a value of the wrong type fails before anything runs. ``conf/method/*.yaml`` holds only aliases
and presets (``ar``, ``beam``) on top of these nodes. Deprecated parameter names (``Params.renamed``)
are kept in the schema as optional keys for one release; the runner maps them to their names now.
"""
from __future__ import annotations

import dataclasses
import typing
from typing import Any, Optional

from hydra.core.config_store import ConfigStore

from harness.decoders.base import Decoder, registry

METHOD_GROUP = "method"
_REGISTERED = False


def method_schema(cls: type[Decoder]) -> type:
    """A Hydra structured-config dataclass for ``cls``: ``name`` (the method) plus its Params fields."""
    hints = typing.get_type_hints(cls.Params)
    fields: list[tuple[str, Any, Any]] = [
        ("name", str, dataclasses.field(default=cls.method, metadata={"help": "the decoder (registered method name)"}))]
    for f in dataclasses.fields(cls.Params):
        fields.append((f.name, hints[f.name], dataclasses.field(default=f.default, metadata=dict(f.metadata))))
    for old, new in getattr(cls.Params, "renamed", {}).items():
        help_text = f"deprecated name of '{new}' (accepted for one release)"
        fields.append((old, Optional[hints[new]], dataclasses.field(default=None, metadata={"help": help_text})))
    return dataclasses.make_dataclass(f"{cls.__name__}Config", fields)


def register_configs() -> None:
    """Store a ``method/<name>`` node for every registered decoder (idempotent)."""
    global _REGISTERED
    if _REGISTERED:
        return
    cs = ConfigStore.instance()
    for name, cls in sorted(registry().items()):
        cs.store(group=METHOD_GROUP, name=name, node=method_schema(cls))
    _REGISTERED = True
