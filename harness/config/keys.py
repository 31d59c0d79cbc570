"""Every key of a composed cell config is one its node's schema knows, however it got there.

Hydra checks the keys of a structured node only for plain overrides: ``+method.gama=3``, ``++method.gama=3``, a
config file or an experiment file may add a key to a typed node, and ``OmegaConf.to_object`` then drops it
without a word (the cell would run with ``gamma`` at its default). :func:`unknown_key_problems` walks the composed
config before it is converted: a node typed by a dataclass (the cell, ``method``, ``decoding``, ``gamma_policy``,
``draft_selection``, ``energy``, ``judge``, ``runner``, ``report``) takes its fields; the nodes that compose untyped
take their schema's (``pair``: :class:`harness.models.PairSpec`, ``gpu``: :class:`harness.energy.hardware.GpuProfile`,
``dataset``: its task's dataclass). Each unknown key is a :class:`~harness.errors.ConfigError` naming the nearest
valid key.
"""
from __future__ import annotations

import dataclasses
import difflib
import re
from typing import Any, Callable, Iterator

from harness.errors import ConfigError


def _pair_keys(node: Any) -> list[str]:
    from harness.models import PairSpec

    return [f.name for f in dataclasses.fields(PairSpec)]


def _gpu_keys(node: Any) -> list[str]:
    from harness.energy.hardware import GpuProfile

    return [f.name for f in dataclasses.fields(GpuProfile)]


def _dataset_keys(node: Any) -> list[str] | None:
    from harness.tasks import task_registry

    cls = task_registry().get(str(node.get("task"))) if "task" in node else None
    return None if cls is None else ["task", *(f.name for f in dataclasses.fields(cls))]  # unknown task: its own error


# the cell's nodes that compose untyped (their group's presets are YAML files): their schema's keys
UNTYPED: dict[str, Callable[[Any], list[str] | None]] = {"pair": _pair_keys, "gpu": _gpu_keys,
                                                         "dataset": _dataset_keys}


def nearest(key: str, valid: list[str]) -> str | None:
    """The valid key closest to ``key`` (a typo's intent), or None when none is close."""
    close = difflib.get_close_matches(key, valid, n=1, cutoff=0.6)
    return close[0] if close else None


def unknown_key_error(path: str, key: str, valid: list[str]) -> ConfigError:
    """``path.key`` is no key of its node: the nearest valid key first, then every valid one."""
    full = f"{path}.{key}" if path else key
    guess = nearest(key, valid)
    hint = f"did you mean '{path + '.' if path else ''}{guess}'? " if guess else ""
    return ConfigError(f"{full}: unknown key; {hint}valid keys of {path or 'the cell'}: {', '.join(sorted(valid))}",
                       key=full)


def _known_keys(node: Any, path: str) -> list[str] | None:
    """The keys the schema of ``node`` (at dotted ``path``) allows; None for a free mapping."""
    from omegaconf import OmegaConf

    cls = OmegaConf.get_type(node)
    if cls is not None and dataclasses.is_dataclass(cls):
        return [f.name for f in dataclasses.fields(cls)]
    if path in UNTYPED:
        return UNTYPED[path](node)
    return None


def _walk(node: Any, path: str) -> Iterator[ConfigError]:
    from omegaconf import DictConfig

    known = _known_keys(node, path)
    for key in node.keys():
        key = str(key)
        if known is not None and key not in known:
            yield unknown_key_error(path, key, known)
            continue
        child = node._get_node(key)
        if isinstance(child, DictConfig) and not child._is_none() and not child._is_missing() and \
                not child._is_interpolation() and (known is not None or path == ""):
            yield from _walk(child, f"{path}.{key}" if path else key)


def unknown_key_problems(cfg: Any) -> list[ConfigError]:
    """Every key of the composed config (a ``DictConfig``, the ``hydra`` node left out) that its node's schema
    does not know, each a ConfigError carrying the key and naming the nearest valid one."""
    from omegaconf import DictConfig

    if not isinstance(cfg, DictConfig):
        return []
    return [e for e in _walk(cfg, "") if e.key != "hydra"]


def check_keys(cfg: Any) -> None:
    """Raise :class:`UnknownKeys` (a ConfigError) when :func:`unknown_key_problems` finds any."""
    problems = unknown_key_problems(cfg)
    if problems:
        raise UnknownKeys(problems)


class UnknownKeys(ConfigError):
    """Keys no schema knows (``errors``: one ConfigError each, with its key)."""

    def __init__(self, errors: list[ConfigError]):
        super().__init__("; ".join(str(e) for e in errors), key=errors[0].key)
        self.errors = errors


_HYDRA_KEY = re.compile(r"Key '([^']+)' not in '([^']+)'\s+full_key: (\S+)")


def _schema_named(type_name: str) -> type | None:
    """The dataclass of a node in Hydra's ConfigStore whose type is called ``type_name``."""
    from hydra.core.config_store import ConfigStore
    from omegaconf import OmegaConf

    stack = [ConfigStore.instance().repo]
    while stack:
        for entry in stack.pop().values():
            if isinstance(entry, dict):
                stack.append(entry)
                continue
            cls = OmegaConf.get_type(entry.node)
            if isinstance(cls, type) and cls.__name__ == type_name and dataclasses.is_dataclass(cls):
                return cls
    return None


def composition_key_error(message: str) -> ConfigError | None:
    """The unknown-key error (with the nearest valid key) of a Hydra composition error about a key its typed
    node does not have (``method.gama=3``, or a config file's ``gama: 3`` under ``method``); None for any other.
    Hydra's own message suggests ``+method.gama=3``, which would add a key no schema knows."""
    m = _HYDRA_KEY.search(message)
    cls = _schema_named(m.group(2)) if m else None
    if m is None or cls is None:
        return None
    path = m.group(3).rpartition(".")[0]
    return unknown_key_error(path, m.group(1), [f.name for f in dataclasses.fields(cls)])
