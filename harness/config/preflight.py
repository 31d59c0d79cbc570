"""Checks before Hydra acts on a config: nothing a config file says runs, and no config explodes, before
the harness has looked at it.

Hydra instantiates every ``hydra.callbacks`` entry (any importable callable, with any arguments) before
the first callback — the harness's validation — runs, and resolves interpolations (which can reference
each other exponentially: ten keys of ten references each make 10^10 nodes) when a job's config is built;
YAML aliases expand likewise while a file loads. So ``harness`` first (:func:`check_argv`):

* scans the YAML files of user config folders (``--config-dir``, ``--config-path``, ``hydra.searchpath``)
  for alias expansion beyond :data:`MAX_CONFIG_NODES`, before Hydra loads any of them;
* composes the config as Hydra will (its own argument parser, search path and composition; nothing is
  instantiated, resolved or logged) and refuses callbacks that are not the harness's own (:data:`OWN_CALLBACKS`),
  logging configs (``hydra.hydra_logging``, ``hydra.job_logging``: Hydra applies them while it starts, and a
  handler writes files or runs a ``()`` factory) that are not one of the presets Hydra and the harness ship,
  a launcher or sweeper that is not one of theirs, any other ``_target_`` (:func:`hydra_problems`), and a config
  whose resolved size or interpolation depth is beyond the bounds (:func:`config_problems`; a resolver's node
  arguments, ``${oc.select:a.b}``, count like references).

Each cell's config is bounded the same way before it is resolved (:func:`resolved_container`). A problem
exits with status 2 having run and written nothing.
"""
from __future__ import annotations

import os
import re
import sys
from pathlib import Path
from typing import Any

MAX_CONFIG_BYTES = 1 << 20  # a resolved config's JSON size; the harness's own are under 10 KB
MAX_CONFIG_NODES = 10_000  # values and containers of a resolved config; the harness's own have under 300
MAX_INTERPOLATION_DEPTH = 32  # references followed through references
OWN_CALLBACKS = {"validate": "harness.config.validation.ValidateCells"}
_REF = re.compile(r"\$\{([^${}]*)\}")


class ConfigTooLarge(ValueError):
    """A config that would resolve beyond the bounds."""


# ---- the resolved size of a config, without resolving it -----------------------------------------------

def _lookup(root: Any, path: tuple) -> Any:
    node = root
    for part in path:
        if isinstance(node, dict) and part in node:
            node = node[part]
        elif isinstance(node, list) and part.isdigit() and int(part) < len(node):
            node = node[int(part)]
        else:
            return None
    return node


def _targets(ref: str, where: tuple, root: Any) -> list[tuple]:
    """The nodes a reference reads: itself (``a.b``, ``.sibling``, ``..uncle``, ``a[0]``), or for a resolver
    call (``oc.select:a.b,default``) every argument that names an existing node (``oc.env:HOME``: none)."""
    if ":" not in ref:
        return [_target(ref, where)]
    args = [a.strip().strip("'\"") for a in ref.split(":", 1)[1].split(",")]
    found = [_target(a, where) for a in args if a and re.fullmatch(r"[\w.\[\]-]+", a)]
    return [t for t in found if t and _lookup(root, t) is not None]


def _target(ref: str, where: tuple) -> tuple:
    """The absolute path of a node reference (``a.b``, ``.sibling``, ``..uncle``, ``a[0]``)."""
    dots = len(ref) - len(ref.lstrip("."))
    parts = tuple(p for p in re.split(r"[.\[\]]", ref.lstrip(".")) if p)
    if not dots:
        return parts
    base = where[:-1]
    return base[: max(0, len(base) - (dots - 1))] + parts


def measure(root: Any) -> tuple[int, int, int]:
    """(resolved JSON size estimate in bytes, resolved nodes, longest chain of interpolations) of a plain
    container whose interpolations are not resolved (``OmegaConf.to_container(resolve=False)``); linear time
    (memoised per node). Raises :class:`ConfigTooLarge` on a reference cycle."""
    memo: dict[tuple, tuple[int, int, int]] = {}
    active: set[tuple] = set()

    def visit(node: Any, path: tuple) -> tuple[int, int, int]:
        if path in memo:
            return memo[path]
        if path in active:
            raise ConfigTooLarge(f"interpolation cycle through '{'.'.join(path)}'")
        active.add(path)
        if isinstance(node, dict):
            parts = [(sum(len(str(k)) + 4 for k in node), 1, 0), *(visit(v, path + (str(k),)) for k, v in node.items())]
        elif isinstance(node, list):
            parts = [(2, 1, 0), *(visit(v, path + (str(i),)) for i, v in enumerate(node))]
        elif isinstance(node, str) and "${" in node:
            parts = [(len(_REF.sub("", node)), 1, 0)]
            for ref in _REF.findall(node):
                for target in _targets(ref.strip(), path, root):
                    size, nodes, depth = visit(_lookup(root, target), target)
                    parts.append((size, nodes, depth + 1))
        else:
            parts = [(len(str(node)) + 2, 1, 0)]
        active.discard(path)
        memo[path] = (sum(p[0] for p in parts), sum(p[1] for p in parts), max(p[2] for p in parts))
        return memo[path]

    return visit(root, ())


def config_problems(cfg) -> list[str]:
    """Why a composed (unresolved) config must not be resolved: its estimated size or interpolation depth."""
    from omegaconf import OmegaConf

    plain = OmegaConf.to_container(cfg, resolve=False) if not isinstance(cfg, dict) else cfg
    try:
        size, nodes, depth = measure(plain)
    except ConfigTooLarge as e:
        return [str(e)]
    except RecursionError:
        return [f"interpolations reference interpolations more than {MAX_INTERPOLATION_DEPTH} deep"]
    out = []
    if size > MAX_CONFIG_BYTES or nodes > MAX_CONFIG_NODES:
        out.append(f"the config would resolve to about {nodes:,} values ({size / 2**20:.1f} MiB: interpolations "
                   f"repeating each other); the limits are {MAX_CONFIG_NODES:,} values and "
                   f"{MAX_CONFIG_BYTES >> 20} MiB")
    if depth > MAX_INTERPOLATION_DEPTH:
        out.append(f"interpolations reference interpolations {depth} deep; the limit is {MAX_INTERPOLATION_DEPTH}")
    return out


def resolved_container(cfg) -> dict:
    """The config as plain, resolved data (typed on the way: :func:`harness.config.schema.as_cell_dict`, the ``hydra``
    node left out) once it is shown to be within the bounds."""
    from harness.config.schema import as_cell_dict

    problems = config_problems(cfg)
    if problems:
        raise ConfigTooLarge("; ".join(problems))
    return as_cell_dict(cfg)


# ---- YAML files, before Hydra loads them ---------------------------------------------------------------

def _plain_tag(tag: str) -> bool:
    return tag.startswith("tag:yaml.org,2002:") and not tag.startswith("tag:yaml.org,2002:python/")


def _all_nodes(roots) -> list:
    """Every node of composed YAML documents, each once (aliases are shared nodes)."""
    import yaml

    seen, todo, out = set(), [r for r in roots if r is not None], []
    while todo:
        node = todo.pop()
        if id(node) in seen:
            continue
        seen.add(id(node))
        out.append(node)
        if isinstance(node, yaml.MappingNode):
            todo += [x for kv in node.value for x in kv]
        elif isinstance(node, yaml.SequenceNode):
            todo += list(node.value)
    return out


def _expanded_size(node, memo: dict[int, int]) -> int:
    """Values and containers under ``node`` once every alias is expanded; ``memo`` (by node id) measures each
    anchored node once, and a recursive alias counts once."""
    import yaml

    if id(node) not in memo:
        memo[id(node)] = 1
        if isinstance(node, yaml.MappingNode):
            memo[id(node)] = 1 + sum(_expanded_size(v, memo) for _, v in node.value)
        elif isinstance(node, yaml.SequenceNode):
            memo[id(node)] = 1 + sum(_expanded_size(v, memo) for v in node.value)
    return memo[id(node)]


def yaml_problems(folder: str | os.PathLike) -> list[str]:
    """YAML files under ``folder`` whose aliases expand beyond :data:`MAX_CONFIG_NODES` (checked on the node
    graph, each anchored node measured once) or that carry a Python or custom tag (``!!python/object``: a
    loader would fail with a traceback, or build objects); files that do not parse: Hydra reports those itself."""
    import yaml

    out = []
    for path in sorted(Path(folder).rglob("*.yaml")):
        try:
            with path.open(encoding="utf-8") as f:
                nodes = list(yaml.compose_all(f, Loader=yaml.SafeLoader))
        except (OSError, UnicodeDecodeError, yaml.YAMLError):
            continue
        memo: dict[int, int] = {}
        total = sum(_expanded_size(n, memo) for n in nodes if n is not None)
        tags = sorted({n.tag for n in _all_nodes(nodes) if not _plain_tag(n.tag)})
        if tags:
            out.append(f"{path}: YAML tag(s) {', '.join(tags)} are not allowed: a config is plain data (no Python "
                       "objects, no custom tags)")
        if total > MAX_CONFIG_NODES:
            out.append(f"{path} expands to {total:,} values (YAML aliases repeating each other); the limit is "
                       f"{MAX_CONFIG_NODES:,}")
    return out


def _user_folders(args) -> list[str]:
    folders = [args.config_dir] if args.config_dir else []
    if args.config_path and os.path.isdir(args.config_path):
        folders.append(args.config_path)
    for o in args.overrides:
        if o.startswith(("hydra.searchpath=", "+hydra.searchpath=")):
            for entry in re.split(r"[\[\],]", o.split("=", 1)[1]):
                entry = entry.strip().strip("'\"")
                if entry.startswith("file://") or (entry and "://" not in entry):
                    folders.append(entry.removeprefix("file://"))
    return [f for f in folders if os.path.isdir(f)]


# ---- the composed config, before Hydra instantiates anything ---------------------------------------------

def callback_problems(cfg) -> list[str]:
    """Callbacks the harness does not own (Hydra would instantiate them before validation), or validation
    taken out."""
    from omegaconf import OmegaConf

    callbacks = OmegaConf.to_container(cfg.hydra.callbacks, resolve=False) if "hydra" in cfg else {}
    out = []
    for name, node in (callbacks or {}).items():
        target = node.get("_target_") if isinstance(node, dict) else None
        if OWN_CALLBACKS.get(name) != target:
            out.append(f"hydra.callbacks.{name}: '{target}' is not one of the harness's own callbacks "
                       f"({', '.join(f'{k}: {v}' for k, v in OWN_CALLBACKS.items())}); Hydra would run it before "
                       "the harness validates anything. Remove it from your config")
    for name, target in OWN_CALLBACKS.items():
        if name not in (callbacks or {}):
            out.append(f"hydra.callbacks.{name} ({target}) was removed: the harness validates every cell before "
                       "running it. Keep it in your config")
    return out


_SHIPPED_GROUPS = ("hydra/hydra_logging", "hydra/job_logging", "hydra/launcher", "hydra/sweeper")


def shipped_presets(conf_dir: str) -> dict[str, list]:
    """Per group of :data:`_SHIPPED_GROUPS`, the presets Hydra, its plugins and the harness ship (the search
    path without any user folder): logging configs whole, launchers and sweepers by ``_target_``. Cached."""
    if conf_dir not in _SHIPPED:
        from hydra._internal.config_repository import ConfigRepository
        from hydra._internal.utils import create_config_search_path
        from omegaconf import OmegaConf

        repo = ConfigRepository(config_search_path=create_config_search_path(conf_dir))
        out: dict[str, list] = {}
        for group in _SHIPPED_GROUPS:
            out[group] = []
            for option in repo.get_group_options(group):
                loaded = repo.load_config(f"{group}/{option}")
                node = OmegaConf.to_container(loaded.config, resolve=False) if loaded and loaded.config else {}
                out[group].append(node if group.endswith("logging") else node.get("_target_"))
        _SHIPPED[conf_dir] = out
    return _SHIPPED[conf_dir]


_SHIPPED: dict[str, dict[str, list]] = {}


def _targets_in(node: Any, path: str = "") -> list[str]:
    """Dotted paths of every ``_target_`` key in a plain container (and ``()`` factories of logging configs)."""
    out = []
    if isinstance(node, dict):
        for k, v in node.items():
            out += [f"{path}{k}"] if k in ("_target_", "()") else _targets_in(v, f"{path}{k}.")
    elif isinstance(node, list):
        for i, v in enumerate(node):
            out += _targets_in(v, f"{path}{i}.")
    return out


def hydra_problems(cfg, conf_dir: str) -> list[str]:
    """Logging configs, launchers and sweepers that are not shipped presets, and ``_target_`` keys anywhere but the
    harness's callbacks, launcher and sweeper: Hydra applies or instantiates them before validation runs."""
    from omegaconf import OmegaConf

    plain = OmegaConf.to_container(cfg, resolve=False)
    hydra = plain.get("hydra") or {}
    shipped, out = shipped_presets(conf_dir), []
    for key in ("hydra_logging", "job_logging"):
        if hydra.get(key) not in shipped[f"hydra/{key}"]:
            out.append(f"hydra.{key} is not one of the logging presets Hydra and the harness ship (Hydra applies it "
                       f"before anything is validated, and a handler writes files): choose one, e.g. "
                       f"hydra/{key}=default or hydra/{key}=disabled, and remove hydra.{key} from your config")
    for key in ("launcher", "sweeper"):
        target = (hydra.get(key) or {}).get("_target_")
        if target not in [t for t in shipped[f"hydra/{key}"] if t]:
            out.append(f"hydra.{key}: '{target}' is not one of the {key}s Hydra and the harness ship "
                       f"({', '.join(sorted({t for t in shipped[f'hydra/{key}'] if t}))})")
    allowed = {f"hydra.callbacks.{name}._target_" for name in OWN_CALLBACKS} | {"hydra.launcher._target_",
                                                                                "hydra.sweeper._target_"}
    logging_paths = ("hydra.hydra_logging.", "hydra.job_logging.")
    for where in _targets_in(plain):
        if where not in allowed and not where.startswith(logging_paths) and not where.startswith("hydra.callbacks."):
            out.append(f"{where}: the harness instantiates nothing a config names; remove it")
    return out


def _compose(args, conf_dir: str):
    """The primary config as Hydra's ``multirun``/``run`` composes it (no callbacks, nothing resolved)."""
    from hydra._internal.hydra import Hydra
    from hydra._internal.utils import create_config_search_path
    from hydra.core.config_search_path import SearchPathQuery
    from hydra.core.global_hydra import GlobalHydra
    from hydra.types import RunMode

    primary = args.config_path or conf_dir  # Hydra takes a relative --config-path from the app's file (harness/)
    search_path = create_config_search_path(os.path.join(os.path.dirname(conf_dir), primary))
    if args.config_dir:
        search_path.prepend(provider="command-line", path=f"file://{os.path.abspath(args.config_dir)}",
                            anchor=SearchPathQuery(provider="schema"))
    GlobalHydra.instance().clear()
    try:
        hydra = Hydra.create_main_hydra2(task_name="harness", config_search_path=search_path)
        return hydra.compose_config(args.config_name or "config", args.overrides,
                                    run_mode=RunMode.MULTIRUN if args.multirun else RunMode.RUN,
                                    with_log_configuration=False)
    finally:
        GlobalHydra.instance().clear()


def argv_problems(argv: list[str], conf_dir: str) -> list[str]:
    """Every preflight problem of a ``harness`` command line (empty when Hydra may go ahead)."""
    from hydra._internal.utils import get_args_parser

    try:
        args = get_args_parser().parse_args(argv)
    except SystemExit:
        return []  # Hydra's own parser reports it
    if args.help or args.hydra_help or args.info or args.shell_completion:
        return []
    problems = launcher_problems(args.overrides) + [p for folder in _user_folders(args) for p in yaml_problems(folder)]
    if problems:
        return problems
    from harness.config.groups import register_configs

    register_configs()
    try:
        cfg = _compose(args, conf_dir)
    except Exception as e:  # noqa: BLE001 — a composition error: Hydra reports it itself, with its own message,
        from harness.config.keys import composition_key_error  # but for an unknown key: the nearest valid one

        known = composition_key_error(f"{e} {e.__cause__ or ''}")
        return [str(known)] if known is not None else []
    return (callback_problems(cfg) if args.cfg is None else []) + hydra_problems(cfg, conf_dir) + config_problems(cfg)


def launcher_problems(overrides: list[str]) -> list[str]:
    """A ``hydra/launcher`` whose plugin is an extra that is not installed
    (:data:`harness.config.extras.LAUNCHERS`): the install line, where Hydra would only say it cannot find the
    launcher's config."""
    from harness.config import extras

    out = []
    for o in overrides:
        key, _, value = o.lstrip("+~").partition("=")
        if key == "hydra/launcher" and value in extras.LAUNCHERS:
            out += [f"hydra/launcher={value}: {m}" for m in extras.missing([extras.LAUNCHERS[value]],
                                                                            f"launcher '{value}'")]
    return out


def check_argv(argv: list[str], conf_dir: str) -> None:
    """Exit with status 2 (nothing run or written) when :func:`argv_problems` finds anything."""
    problems = argv_problems(argv, conf_dir)
    if problems:
        print("harness: refusing this configuration before anything runs:\n" + "\n".join(f"  - {p}" for p in problems),
              file=sys.stderr, flush=True)
        sys.exit(2)
