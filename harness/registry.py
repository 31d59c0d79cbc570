"""One generic registry of named classes, used for decoders (``method``) and tasks (``task``).

A registry maps a name (a class attribute, e.g. ``Decoder.method`` or ``Task.kind``) to a class. Classes
register themselves with the :meth:`Registry.register` decorator in their own module; the first lookup
imports every module of the registry's package (except ``base`` and private ones), so that adding a
decoder or a task is adding one file. Unknown names fail with the valid choices.
"""
from __future__ import annotations

import importlib
import pkgutil
from typing import Generic, TypeVar

from harness.errors import ConfigError

T = TypeVar("T", bound=type)


class Registry(Generic[T]):
    """Named classes of one kind.

    ``kind`` names the choice in messages ("method", "task kind"); ``key`` is the class attribute
    holding the name; ``package`` is the dotted package whose modules hold the classes.
    """

    def __init__(self, kind: str, key: str, package: str):
        self.kind, self.key, self.package = kind, key, package
        self._classes: dict[str, T] = {}
        self._loaded = False

    def register(self, cls: T) -> T:
        """Class decorator: register ``cls`` under ``getattr(cls, key)``."""
        name = getattr(cls, self.key, "")
        if not name:
            raise TypeError(f"{cls.__name__} has no {self.key} name")
        other = self._classes.get(name)
        if other is not None and other is not cls:
            raise TypeError(f"{self.kind} '{name}' registered twice ({other.__name__}, {cls.__name__})")
        self._classes[name] = cls
        return cls

    def load(self) -> None:
        """Import every module of the package once, so that every class has registered."""
        if self._loaded:
            return
        pkg = importlib.import_module(self.package)
        for m in pkgutil.iter_modules(pkg.__path__):
            if m.name != "base" and not m.name.startswith("_"):
                importlib.import_module(f"{self.package}.{m.name}")
        self._loaded = True

    def all(self) -> dict[str, T]:
        self.load()
        return dict(self._classes)

    def names(self) -> list[str]:
        return sorted(self.all())

    def get(self, name: str) -> T:
        classes = self.all()
        if name not in classes:
            raise ConfigError(f"unknown {self.kind} '{name}'. Valid {self.kind}s: {', '.join(sorted(classes))}")
        return classes[name]

    def __contains__(self, name: str) -> bool:
        return name in self.all()
