"""``harness ls``: what can be chosen, and every parameter's default and help.

``harness ls`` lists the config groups and their options; ``harness ls methods`` (or ``policies``,
``datasets``, ``pairs``, ``decodings``, ``gpus``, ``energy``, ``experiments``, or any group name) lists a
group's options with a one-line description; ``harness ls method sd`` shows one option's keys with
their defaults and help. The listing comes from Hydra's own config repository (the shipped
``conf`` plus the ConfigStore nodes, and ``--config-dir DIR`` for your own groups), so it shows
exactly what ``harness`` accepts. Help text is the ``help`` metadata of a structured config's fields
(the decoders' ``Params``) or the trailing comment of a YAML key.
"""
from __future__ import annotations

import argparse
import dataclasses
import re
import sys
from pathlib import Path
from typing import Any

ALIASES = {"methods": "method", "policies": "gamma_policy", "policy": "gamma_policy", "datasets": "dataset",
           "pairs": "pair", "decodings": "decoding", "gpus": "gpu", "experiments": "experiment",
           "draft_selections": "draft_selection"}
_COMMENT = re.compile(r"^(?P<indent>\s*)(?P<key>[A-Za-z_][\w]*):(?P<value>[^#]*?)\s*#\s?(?P<help>.*)$")


def _group_name(name: str) -> str:
    return ALIASES.get(name, name)


class Catalog:
    """Hydra's config repository seen as groups → options → keys (with defaults and help)."""

    def __init__(self, config_dir: str | None = None):
        from hydra import initialize_config_dir
        from hydra.core.global_hydra import GlobalHydra

        from harness.config.groups import register_configs
        from harness.resources import conf_dir

        register_configs()
        self.user_dir = Path(config_dir).resolve() if config_dir else None
        self.dirs = [d for d in (self.user_dir, conf_dir()) if d is not None]
        GlobalHydra.instance().clear()
        self._ctx = initialize_config_dir(config_dir=str(conf_dir()), version_base="1.3")
        self._ctx.__enter__()
        self.loader = GlobalHydra.instance().config_loader()
        self._extra = [f"hydra.searchpath=[file://{self.user_dir}]"] if self.user_dir else []

    def close(self) -> None:
        self._ctx.__exit__(None, None, None)

    def groups(self) -> list[str]:
        from hydra.core.object_type import ObjectType

        names = self.loader.get_group_options("", results_filter=ObjectType.GROUP, overrides=self._extra)
        return sorted(n for n in names if n != "hydra")

    def options(self, group: str) -> list[str]:
        return sorted(self.loader.get_group_options(group, overrides=self._extra))

    def yaml_path(self, group: str, option: str) -> Path | None:
        for d in self.dirs:
            p = d / group / f"{option}.yaml"
            if p.is_file():
                return p
        return None

    def describe(self, group: str, option: str) -> str:
        """One line: the decoder's docstring for a method, else the YAML file's first comment line."""
        if group == "method":
            doc = _method_doc(option)
            if doc is not None:
                return _first_line(doc)
        if group == "gamma_policy":
            from harness.adaptive.policies import POLICIES

            if option in POLICIES:
                return _first_line(sys.modules[POLICIES.get(option).__module__].__doc__ or "")
        path = self.yaml_path(group, option)
        if path is not None:
            for line in path.read_text(encoding="utf-8").splitlines():
                if line.startswith("#"):
                    text = line.lstrip("#").strip()
                    if text and not text.startswith("@package"):
                        return text
                elif line.strip():
                    break
        return ""

    def keys(self, group: str, option: str) -> list[tuple[str, Any, str]]:
        """(key, default, help) of one option, as composed (defaults lists applied)."""
        from hydra import compose
        from omegaconf import OmegaConf

        prefix = "+" if group == "experiment" else ""
        cfg = compose(config_name="config", overrides=[*self._extra, f"{prefix}{group}={option}"])
        node = OmegaConf.select(cfg, group.replace("/", "."))
        if node is None:  # an @package _global_ option (experiments): its header is its description
            return []
        helps = _dataclass_help(OmegaConf.get_type(node))
        path = self.yaml_path(group, option)
        if path is not None:
            helps.update(_yaml_help(path))
        values = OmegaConf.to_container(node, resolve=False)
        return [(k, v, helps.get(k, "")) for k, v in values.items()]


def _method_doc(name: str) -> str | None:
    """A method's description: its decoder module's docstring, read from the source (a decoder of this package is
    not imported: ``harness ls`` stays torch-free); a plugin's decoder, imported; None for no method."""
    import ast
    import importlib.util

    from harness.config.groups import methods

    if name not in methods():  # an alias (conf/method/*.yaml): its YAML comment
        return None
    spec = importlib.util.find_spec(f"harness.decoders.{name}")
    if spec is not None and spec.origin:
        return ast.get_docstring(ast.parse(Path(spec.origin).read_text(encoding="utf-8"))) or ""
    from harness.decoders.base import registry

    cls = registry().get(name)
    return None if cls is None else (sys.modules[cls.__module__].__doc__ or cls.__doc__ or "")


def _first_line(doc: str) -> str:
    text = re.sub(r"``|:\w+:`~?[\w.]*?(\w+)`", lambda m: m.group(1) or "", doc.strip().split("\n\n")[0])
    text = " ".join(text.split())
    return text if len(text) <= 110 else text[:107].rsplit(" ", 1)[0] + " ..."


def _dataclass_help(kind) -> dict[str, str]:
    if kind is None or not dataclasses.is_dataclass(kind):
        return {}
    return {f.name: str(f.metadata.get("help", "")) for f in dataclasses.fields(kind)}


def _yaml_help(path: Path) -> dict[str, str]:
    """Trailing comments of a YAML file's top-level keys (continuation comment lines appended)."""
    out: dict[str, str] = {}
    last = None
    for line in path.read_text(encoding="utf-8").splitlines():
        m = _COMMENT.match(line)
        if m and not m.group("indent"):
            last = m.group("key")
            out[last] = m.group("help").strip()
        elif last and re.match(r"^\s+#", line):
            out[last] += " " + line.strip().lstrip("#").strip()
        else:
            last = None
    return out


def _fmt(value: Any) -> str:
    text = "null" if value is None else str(value).lower() if isinstance(value, bool) else str(value)
    return text if len(text) <= 40 else text[:37] + "..."


def _print_group(cat: Catalog, group: str, verbose: bool) -> None:
    for option in cat.options(group):
        print(f"  {option:<28} {cat.describe(group, option)}")
        if verbose:
            _print_keys(cat, group, option, indent="      ")


def _print_keys(cat: Catalog, group: str, option: str, indent: str = "  ") -> None:
    for key, value, text in cat.keys(group, option):
        print(f"{indent}{group}.{key} = {_fmt(value)}" + (f"    # {text}" if text else ""))


def ls_main(argv: list[str]) -> int:
    p = argparse.ArgumentParser(prog="harness ls", description=__doc__.split("\n\n")[0],
                                epilog="groups: " + ", ".join(sorted(set(ALIASES))) + ", or any config group")
    p.add_argument("group", nargs="?", help="a config group (methods, policies, datasets, pairs, ...)")
    p.add_argument("option", nargs="?", help="one option of the group: show its keys, defaults and help")
    p.add_argument("-v", "--verbose", action="store_true", help="every option's keys too")
    p.add_argument("--config-dir", default=None, help="a user config directory added to Hydra's search path")
    args = p.parse_args(argv)
    cat = Catalog(args.config_dir)
    try:
        if args.group is None:
            for group in cat.groups():
                print(f"{group}: {', '.join(cat.options(group))}")
            return 0
        group = _group_name(args.group)
        if group not in cat.groups():
            print(f"harness ls: error: unknown group '{args.group}'. Valid: {', '.join(cat.groups())} "
                  f"(aliases: {', '.join(sorted(ALIASES))})", file=sys.stderr)
            return 2
        if args.option is None:
            print(f"{group}:")
            _print_group(cat, group, args.verbose)
            return 0
        if args.option not in cat.options(group):
            print(f"harness ls: error: unknown {group} '{args.option}'. Valid: {', '.join(cat.options(group))}",
                  file=sys.stderr)
            return 2
        print(f"{group}={args.option}: {cat.describe(group, args.option)}")
        _print_keys(cat, group, args.option)
        return 0
    finally:
        cat.close()
