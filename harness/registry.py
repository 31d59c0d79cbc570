"""One generic registry of named classes, used for decoders (``method``), γ policies and tasks (``task``).

A registry maps a name (a class attribute, e.g. ``Decoder.method`` or ``Task.kind``) to a class. Classes
register themselves with the :meth:`Registry.register` decorator in their own module; the first lookup
imports every module of the registry's package (except ``base`` and private ones), so that adding a
decoder or a task is adding one file. Unknown names fail with the valid choices.

Methods that live in another installed package come in through an entry-point group (``harness.decoders``,
``harness.gamma_policies``: :data:`ENTRY_POINT_GROUPS`): each entry point names a module (whose classes register
themselves) or a class (registered here), and every class must subclass the registry's base class. Only
installed distributions declare entry points; nothing a config file names is ever imported (a config only picks
among the registered names), so :mod:`harness.config.preflight`'s rule holds. See ``docs`` / the example package
``tests/plugin_example``.
"""
from __future__ import annotations

import importlib
import importlib.metadata
import inspect
import pkgutil
from typing import Generic, TypeVar

from harness.errors import ConfigError

T = TypeVar("T", bound=type)
ENTRY_POINT_GROUPS = ("harness.decoders", "harness.gamma_policies")  # the registries other packages extend


class Registry(Generic[T]):
    """Named classes of one kind.

    ``kind`` names the choice in messages ("method", "task kind"); ``key`` is the class attribute
    holding the name; ``package`` is the dotted package whose modules hold the classes.
    """

    def __init__(self, kind: str, key: str, package: str, entry_points: str | None = None,
                 base: type | None = None):
        self.kind, self.key, self.package = kind, key, package
        self.entry_points, self.base = entry_points, base  # the entry-point group; what every class subclasses
        self._classes: dict[str, T] = {}
        self._loaded = False

    def register(self, cls: T) -> T:
        """Class decorator: register ``cls`` under ``getattr(cls, key)`` (a subclass of the registry's base)."""
        base = self.base
        if base is not None and not (inspect.isclass(cls) and issubclass(cls, base)):
            raise TypeError(f"{getattr(cls, '__name__', cls)!r} is not a subclass of "
                            f"{base.__module__}.{base.__name__}: it cannot be a {self.kind}")
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
        if self.entry_points:
            for ep in importlib.metadata.entry_points(group=self.entry_points):
                self._load_entry_point(ep)
        self._loaded = True

    def _load_entry_point(self, ep: importlib.metadata.EntryPoint) -> None:
        """An installed package's entry point: a module (its classes register themselves) or a class."""
        dist = getattr(ep, "dist", None)
        where = f"entry point '{ep.name} = {ep.value}' of group {self.entry_points}" + \
            (f" (package {dist.name})" if dist is not None else "")
        try:
            obj = ep.load()
        except Exception as e:  # a broken plugin: named, with its error, instead of a bare traceback
            raise ConfigError(f"{where} cannot be loaded: {type(e).__name__}: {e}") from e
        if inspect.ismodule(obj):
            return
        try:
            self.register(obj)
        except TypeError as e:
            raise ConfigError(f"{where}: {e}") from e

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
