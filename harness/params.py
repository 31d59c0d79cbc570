"""Parameters as frozen, self-validating dataclasses: one base for every config group with typed choices.

A decoder's ``Params`` (the ``method`` group), a γ policy's (``gamma_policy``) and draft selection's
(``draft_selection``) are frozen dataclasses whose fields, declared with :func:`param` (default and help
text), are the group's config keys: Hydra's ConfigStore nodes are generated from them
(:mod:`harness.config.groups`), and ``__post_init__`` checks the values (a :class:`~harness.errors.ConfigError`
naming the key and the valid range). Torch-free, so config tools and the cell identity can import it.
"""
from __future__ import annotations

import dataclasses
from dataclasses import dataclass, field
from typing import Any

from harness.errors import ConfigError


def param(default, help: str, **kwargs):  # noqa: A002 — the metadata key is Hydra/argparse's "help"
    """A Params field with its help text (shown in the README's tables, ``--cfg job`` and config errors)."""
    return field(default=default, metadata={"help": help, **kwargs})


def help_of(cls: type, name: str) -> str:
    """The short help of field ``name`` of dataclass ``cls`` (up to its first ``;`` or `` (``)."""
    for f in dataclasses.fields(cls):
        if f.name == name:
            return f.metadata.get("help", name).split(";")[0].split(" (")[0]
    return name


@dataclass(frozen=True)
class Params:
    """Base of every parameter dataclass: its fields are the config keys of one group node."""

    def as_dict(self) -> dict[str, Any]:
        return {f.name: getattr(self, f.name) for f in dataclasses.fields(self)}

    def check_at_least(self, minimum: int, *names: str) -> None:
        """ConfigError naming the first of ``names`` whose value is below ``minimum``."""
        for name in names:
            value = getattr(self, name)
            if value < minimum:
                raise ConfigError(f"{name} ({help_of(type(self), name)}) must be >= {minimum}, got {value}")

    def check(self, name: str, ok: bool, valid: str) -> None:
        """ConfigError ``<group> <name> = <value> is out of range; valid: <valid>`` unless ``ok``."""
        if not ok:
            raise ConfigError(f"{self.describe_group()} {name} = {getattr(self, name)!r} is out of range; "
                              f"valid: {valid}")

    def describe_group(self) -> str:
        """How messages name this node (e.g. "gamma policy 'online':")."""
        return f"{type(self).__name__}:"

    @classmethod
    def field_names(cls) -> list[str]:
        return [f.name for f in dataclasses.fields(cls)]

    @classmethod
    def create(cls, values: dict[str, Any], what: str):
        """``cls(**values)`` with a clear error naming the valid keys (``what``: e.g. "method 'sd'")."""
        unknown = sorted(set(values) - set(cls.field_names()))
        if unknown:
            raise ConfigError(f"unknown parameter(s) {unknown} for {what}. "
                              f"Valid parameters: {', '.join(sorted(cls.field_names())) or '(none)'}")
        try:
            return cls(**values)
        except TypeError as e:
            raise ConfigError(f"bad parameters for {what}: {e}") from e


def is_int(value: Any) -> bool:
    return isinstance(value, int) and not isinstance(value, bool)


def is_number(value: Any) -> bool:
    return isinstance(value, (int, float)) and not isinstance(value, bool)
