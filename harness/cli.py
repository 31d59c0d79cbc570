"""Console entry points: ``harness`` (the Hydra app: one cell, or a sweep with ``-m``) and
``harness-report`` (see :mod:`harness.report`).

Before Hydra composes anything, command-line overrides are checked against the config
tree, so an unknown method or key fails with a message that lists the valid choices.
"""
from __future__ import annotations

import logging
import sys
from pathlib import Path

import yaml

from harness.errors import ConfigError

CONF_DIR = Path(__file__).resolve().parents[1] / "conf"
_FAILED: list[str] = []


def config_groups(conf_dir: Path = CONF_DIR) -> dict[str, list[str]]:
    """Config group → its option names (the YAML files in ``conf/<group>/``)."""
    return {d.name: sorted(p.stem for p in d.glob("*.yaml")) for d in sorted(conf_dir.iterdir())
            if d.is_dir() and d.name != "hydra"}


def _keys(node, prefix="") -> set[str]:
    out = set()
    if isinstance(node, dict):
        for k, v in node.items():
            if k in ("defaults", "hydra"):
                continue
            out.add(prefix + k)
            out |= _keys(v, prefix + k + ".")
    return out


def _load_yaml(path: Path) -> dict:
    return yaml.safe_load(path.read_text()) or {}


def check_overrides(args: list[str], conf_dir: Path = CONF_DIR) -> None:
    """Raise :class:`ConfigError` for an unknown group option or key in ``args`` (Hydra override syntax)."""
    from hydra.core.override_parser.overrides_parser import OverridesParser

    tokens = [a for a in args if not a.startswith("-")]
    try:
        overrides = OverridesParser.create().parse_overrides(tokens)
    except Exception as e:  # noqa: BLE001 — Hydra's parser error is clear; rewrap it
        raise ConfigError(f"cannot parse overrides {tokens}: {e}") from e
    groups = config_groups(conf_dir)
    root = _load_yaml(conf_dir / "config.yaml")
    chosen = {g: [o] for g, o in ((list(d.items())[0]) for d in root.get("defaults", [])
                                   if isinstance(d, dict)) if g in groups}
    for o in overrides:
        key = o.key_or_group
        if o.is_add() or o.is_delete() or key.startswith("hydra") or o.package:
            continue
        if key in groups:
            values = list(o.sweep_string_iterator()) if o.is_sweep_override() else [str(o.value())]
            bad = [v for v in values if v not in groups[key]]
            if bad:
                raise ConfigError(f"unknown {key} {', '.join(repr(b) for b in bad)}. "
                                  f"Valid choices for {key}: {', '.join(groups[key])}")
            chosen[key] = values
    valid_root = _keys(root)
    for o in overrides:
        key = o.key_or_group
        if o.is_add() or o.is_delete() or key.startswith("hydra") or key in groups or o.package:
            continue
        group, _, sub = key.partition(".")
        if group in groups and sub:
            options = chosen.get(group, [])
            valid = set().union(*(_keys(_load_yaml(conf_dir / group / f"{opt}.yaml")) for opt in options))
            if sub not in valid:
                raise ConfigError(f"unknown key '{key}' for {group} {', '.join(options)}. Valid keys: "
                                  f"{', '.join(sorted(valid))} (prefix with + to add a new key)")
        elif key not in valid_root:
            top = sorted(k for k in valid_root if "." not in k) + sorted(groups)
            raise ConfigError(f"unknown config key '{key}'. Valid top-level keys and groups: {', '.join(top)}")


def _hydra_app():
    import hydra
    from omegaconf import OmegaConf

    @hydra.main(version_base="1.3", config_path=str(CONF_DIR), config_name="config")
    def app(cfg) -> None:
        from harness.runner import run_cell

        container = OmegaConf.to_container(cfg, resolve=True)
        outcome = run_cell(container, container["results_dir"], force=bool(container.get("force")))
        print(f"[{outcome.status}] {outcome.cell_id}" + (f": {outcome.error}" if outcome.error else ""), flush=True)
        if outcome.status == "failed":
            _FAILED.append(outcome.cell_id)

    return app


def main() -> None:
    logging.getLogger("harness").setLevel(logging.INFO)
    try:
        check_overrides(sys.argv[1:])
    except ConfigError as e:
        print(f"harness: error: {e}", file=sys.stderr)
        sys.exit(2)
    _hydra_app()()
    if _FAILED:
        print(f"harness: {len(_FAILED)} cell(s) failed; see error.json in their cell folders: {', '.join(_FAILED)}",
              file=sys.stderr)
        sys.exit(1)
