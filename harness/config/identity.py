"""Cell identity: which settings make two runs the same measurement.

A cell's id is readable (method, decoding, pair, dataset, gpu, seed) followed by a hash of its whole
composed config except the keys in :data:`RESULT_NEUTRAL_KEYS`. So every setting that can change what a
cell measures — ``max_new_tokens``, the decoding's warp, every method parameter, the dataset's prompt
selection (``num_prompts``, ``sample_seed``, ``path``, ``prompt_format``...), the pair's dtype and
device, the runner's warm-up, threads and timing synchronisation, every energy setting — gives a
different id, and a sweep over it (``-m max_new_tokens=8,16``) runs one cell per value. New config keys
are in the identity by default; a key joins the allow-list only when it cannot change a result.

Not in the identity, by design: package versions and the git commit (recorded in every summary's
``env`` and shown in the report's provenance; a code or library upgrade would otherwise silently
orphan every finished cell), and the resolved ``gpu: auto`` (the runner replaces it by the machine's
label before the id is taken, so the id names the hardware that measured it).

Identity versions (``identity_version`` in each summary; absent = 1; every version: :data:`VERSIONS`): version 1
hashes the config in release 0.2's layout (the γ policy and draft selection inside ``method``, 0.2's decoding preset
names: :func:`harness.config.legacy.layout_0_2`, the file-reader side), version 2 the config as composed. New cells are
measured under :data:`IDENTITY_VERSION` = 2, so their ids no longer go through release 0.2's layout; a cell measured
under another version keeps its id: :func:`known_ids` lists every id a config's cell may have, under which
:func:`harness.run.cell.prepare_cell` finds a finished or partly run cell (reused or resumed, never run twice),
``force=`` names it and ``harness merge`` sees it already present; :func:`check_reusable` compares under the stored
version. Comparisons between cells (a method and its baseline) do not depend on the id: they read the stored configs
in one layout (:func:`comparison_config`).

Before a finished cell is reused, the config stored in its ``summary.json`` is compared with the
requested one (:func:`check_reusable`): equal identity → reuse; different (a hash collision, a
hand-edited or foreign summary, a summary without its config) → :class:`CellConflict`, and the run
stops before anything loads, naming the differing keys (``force=<cell id>`` reruns the cell, or choose
another ``results_dir``).
"""
from __future__ import annotations

import copy
import hashlib
import json
import re
from pathlib import Path
from typing import Any, Mapping

from harness.errors import ConfigError

IDENTITY_VERSION = 2  # 1: the config in release 0.2's layout; 2: the config as composed (module docstring)
VERSIONS = (1, 2)  # every identity version a stored cell may have (pinned ids of each: tests/config/test_identity.py)
VERSION_KEY = "identity_version"  # in each summary.json (absent: 1)

# dotted key -> why it cannot change a result (tested: tests/config/test_identity.py)
RESULT_NEUTRAL_KEYS: dict[str, str] = {
    "results_dir": "where the cell's files are written, not what it measures",
    "force": "whether a finished cell is rerun, not what it measures",
    "runner.progress": "progress bars on the terminal only",
    "runner.interleave": "when each prompt runs relative to the other methods' (every prompt is seeded on its own, so "
                         "outputs and counts are equal: tests/run/test_interleave.py); the summary records "
                         "`interleaved`",
    "report": "what harness-report compares and which papers' tables it draws (baselines, iso pairs, tables), read "
              "from the stored config: the cell measures the same",
    "judge": "who grades the finished records (harness.judge): judgments go to their own files, tagged with the judge; "
             "records and summary are the same whatever the judge",
    "tracker": "where finished cells are copied (wandb, mlflow: harness.results.trackers), after they are written",
}
# dotted key -> why null is the same measurement as the key's absence (keys added after cells were measured:
# null keeps every existing cell id; a value is in the identity like any other key)
ABSENT_WHEN_NULL: dict[str, str] = {
    "gamma_policy": "null = the method's fixed gamma, what every cell measured before the group existed",
    "draft_selection": "null = the pair's draft, what every cell measured before the group existed",
    "pair.revision": "null = the checkpoint as found, what every cell measured before the key existed",
    "pair.draft_revision": "null = the checkpoint as found, what every cell measured before the key existed",
    "method.prompt_lookup_num_tokens": "hf_assisted: null = the assistant model, what every hf_assisted cell measured "
                                       "before HF's prompt lookup became an option",
    "method.greedy_roots": "mcsd_target_init: null = the target's argmax as the one greedy root, what every cell "
                           "measured before the paper's top-n_t option existed",
    "method.max_matching_ngram_size": "hf_assisted: null = not prompt lookup (or HF's default), as before the key "
                                      "existed",
    "dataset.categories": "spec_bench: null = every category, the prompts every cell ran before the key existed",
    "dataset.per_category": "spec_bench: null = every prompt of each category, as before the key existed",
    "energy.self_check": "null = the polled meter's start-of-run self-check where it applies (no sensor profile): "
                         "part of the meter's code, like its other steps (code versions are not in the identity: "
                         "above); it changes no cell without a polled power reading. An explicit true/false is in "
                         "the identity",
}
# dotted key -> (default, why the default is the same measurement as the key's absence): keys added after cells
# were measured, whose default is what every earlier cell ran (the default keeps every existing cell id)
ABSENT_WHEN_DEFAULT: dict[str, tuple[Any, str]] = {
    "pair.execution": ("eager", "eager = transformers' dynamic caches and one launch per op, what every cell measured "
                                "before the graphs mode existed"),
}
#: the top-level config nodes that are the method's side of a comparison: the method itself, the γ policy and the
#: draft selection (a trained head is a method parameter). Cells that differ only in these are one comparison
#: group: they run interleaved (:func:`harness.run.cell.interleave_key`) and pair as method and baseline
#: (:func:`harness.analysis.regime.comparison_items`) -- EAGLE-2 with a γ policy against AR, every policy against AR.
METHOD_SIDE_KEYS: tuple[str, ...] = ("method", "gamma_policy", "draft_selection")
HASH_CHARS = 12
SUMMARY = "summary.json"  # the same name as harness.results.store.SUMMARY (kept free of the store's imports)


class CellConflict(ConfigError):
    """A finished cell at this id was measured under a different configuration."""


def _drop(cfg: dict, dotted: str) -> None:
    *parents, last = dotted.split(".")
    node: Any = cfg
    for p in parents:
        node = node.get(p) if isinstance(node, dict) else None
        if node is None:
            return
    if isinstance(node, dict):
        node.pop(last, None)


def _layout(cfg: Mapping[str, Any], version: int | None) -> dict:
    version = IDENTITY_VERSION if version is None else version
    if version not in VERSIONS:
        raise ValueError(f"identity version {version!r} is unknown to this release (known: {VERSIONS})")
    if version == 1:
        from harness.config.legacy import layout_0_2  # ids of cells measured by release 0.2/0.3; comparisons

        return layout_0_2(cfg)
    return copy.deepcopy(dict(cfg))


def identity_config(cfg: Mapping[str, Any], version: int | None = None) -> dict:
    """The part of a cell config that defines the measurement: everything except :data:`RESULT_NEUTRAL_KEYS`
    (and Hydra's own ``hydra`` node, when present); under identity ``version`` 1 in release 0.2's layout
    (:func:`harness.config.legacy.layout_0_2`), under 2 (the default, :data:`IDENTITY_VERSION`) as composed."""
    out = _layout(cfg, version)
    out.pop("hydra", None)
    for key in RESULT_NEUTRAL_KEYS:
        _drop(out, key)
    for key in ABSENT_WHEN_NULL:
        parent, _, last = key.rpartition(".")
        node = out.get(parent) if parent else out
        if isinstance(node, dict) and last in node and node[last] is None:
            del node[last]
    for key, (default, _) in ABSENT_WHEN_DEFAULT.items():
        parent, _, last = key.rpartition(".")
        node = out.get(parent) if parent else out
        if isinstance(node, dict) and last in node and node[last] == default:
            del node[last]
    return out


def comparison_config(cfg: Mapping[str, Any]) -> dict:
    """The identity config without the method's side (:data:`METHOD_SIDE_KEYS`): what a method and its baseline
    share (pair, dataset and its prompts, decoding, gpu, seed, runner and energy settings)."""
    out = identity_config(cfg, version=1)  # stored configs of any identity version, compared in one layout
    for key in METHOD_SIDE_KEYS:
        out.pop(key, None)
    return out


def resolve_alias(cfg: Mapping[str, Any]) -> Mapping[str, Any]:
    """``cfg`` with an alias method (``ar``, ``beam``: :mod:`harness.config.aliases`) replaced by the decoder it
    resolves to under the cell's decoding, with that decoder's keys only (an alias composes its greedy target's
    keys, which the sampling one may lack and does not apply): ``method=beam decoding=sampling`` is the cell
    ``method=beam_sampling decoding=sampling``, one id. Other configs are returned as they are."""
    from harness.config.aliases import ALIASES, decoding_kind

    method = cfg.get("method")
    if not isinstance(method, Mapping) or method.get("name") not in ALIASES:
        return cfg
    name = method["name"]
    target = ALIASES[name][decoding_kind(cfg.get("decoding"))]
    keys = set(method)
    if target != ALIASES[name]["greedy"]:  # the sampling target's own keys (loads the decoder registry)
        import dataclasses

        from harness.methods import decoder_class

        keys = {f.name for f in dataclasses.fields(decoder_class(target).Params)}
    return {**cfg, "method": {"name": target, **{k: v for k, v in method.items() if k != "name" and k in keys}}}


def _canonical(cfg: Mapping[str, Any], version: int | None = None, aliases: bool = True) -> str:
    ident = identity_config(resolve_alias(cfg) if aliases else cfg, version)
    return json.dumps(ident, sort_keys=True, default=str, separators=(",", ":"))


def config_hash(cfg: Mapping[str, Any], version: int | None = None, aliases: bool = True) -> str:
    return hashlib.sha256(_canonical(cfg, version, aliases).encode()).hexdigest()[:HASH_CHARS]


def id_component(value: Any) -> str:
    """One readable part of a cell id: the value with every character outside ``[A-Za-z0-9._+=-]`` (a path
    separator) replaced by ``_``, so the id is one folder name whatever the config says; names that are
    already plain are kept as they are. The id's hash tells apart names that differ only in replaced characters."""
    return re.sub(r"[^A-Za-z0-9._+=-]", "_", str(value)) or "_"


def cell_id(cfg: Mapping[str, Any], version: int | None = None, aliases: bool = True) -> str:
    """``method[__decoding]__pair__dataset__gpu__s<seed>__<hash>``, one folder name: each readable part is
    sanitised (:func:`id_component`); the hash covers :func:`identity_config` under identity ``version`` (under 1 the
    decoding label too is 0.2's: such ``sampling_dsbd`` cells keep their ``sampling_seed000`` ids). An alias method
    is named and hashed as the decoder it resolves to (:func:`resolve_alias`); ``aliases=False`` gives the id such a
    cell had before (release 0.3.0.dev0), under which a finished one is still found
    (:func:`harness.run.cell.prepare_cell`)."""
    labels = _layout(resolve_alias(cfg) if aliases else cfg, version)
    parts = [labels["method"]["name"]]
    if labels.get("decoding"):
        parts.append(labels["decoding"].get("name", "custom"))
    parts += [cfg["pair"]["name"], cfg["dataset"]["name"], cfg["gpu"]["name"], f"s{cfg['seed']}"]
    return "__".join([*(id_component(p) for p in parts), config_hash(cfg, version, aliases)])


def _id_variants(cfg: Mapping[str, Any]) -> list[tuple[int, str]]:
    """(version, id) of every id ``cfg``'s cell may have: the current version first, then the others (newest first),
    then, per version, the id an alias cell had before aliases were named by their decoder (``aliases=False``)."""
    versions = [IDENTITY_VERSION, *sorted((v for v in VERSIONS if v != IDENTITY_VERSION), reverse=True)]
    return [(v, cell_id(cfg, version=v, aliases=a)) for a in (True, False) for v in versions]


def known_ids(cfg: Mapping[str, Any]) -> list[str]:
    """Every id under which ``cfg``'s cell may be in a results folder, without repeats: :func:`cell_id` under the
    current :data:`IDENTITY_VERSION` first (a new cell's), then under the other :data:`VERSIONS`, then the ids alias
    cells had before (``aliases=False``)."""
    return list(dict.fromkeys(cid for _, cid in _id_variants(cfg)))


def version_of(cid: str, cfg: Mapping[str, Any]) -> int:
    """The identity version under which ``cid`` is ``cfg``'s id (the current one when several give it); ValueError
    when ``cid`` is no id of ``cfg`` under any of :data:`VERSIONS`."""
    for version, known in _id_variants(cfg):
        if known == cid:
            return version
    raise ValueError(f"{cid} is not the id of this config under any identity version {VERSIONS}")


def flatten(cfg: Any, prefix: str = "") -> dict[str, Any]:
    """Dotted leaf keys of a nested config (lists are leaves)."""
    if isinstance(cfg, Mapping):
        out: dict[str, Any] = {}
        for k, v in cfg.items():
            key = f"{prefix}.{k}" if prefix else str(k)
            if isinstance(v, Mapping) and v:
                out.update(flatten(v, key))
            else:
                out[key] = v
        return out
    return {prefix: cfg}


def differences(stored: Mapping[str, Any], requested: Mapping[str, Any], version: int | None = None) -> list[str]:
    """``key: stored X, requested Y`` for every identity key whose values differ (under identity ``version``)."""
    a = flatten(json.loads(json.dumps(identity_config(resolve_alias(stored), version), default=str)))
    b = flatten(json.loads(json.dumps(identity_config(resolve_alias(requested), version), default=str)))
    missing = object()
    return [f"{k}: stored {a.get(k, '<absent>')!r}, requested {b.get(k, '<absent>')!r}"
            for k in sorted(set(a) | set(b)) if a.get(k, missing) != b.get(k, missing)]


def check_reusable(cell_dir: Path, cfg: Mapping[str, Any]) -> None:
    """Raise :class:`CellConflict` unless the finished cell in ``cell_dir`` was measured under ``cfg``'s
    identity. Call only for a finished cell (its summary exists)."""
    path = Path(cell_dir) / SUMMARY
    try:
        summary = json.loads(path.read_text(encoding="utf-8"))
        stored = summary.get("config") if isinstance(summary, dict) else None
    except (OSError, UnicodeDecodeError, json.JSONDecodeError) as e:
        raise CellConflict(f"cell {Path(cell_dir).name}: its {path} cannot be read ({e}); it cannot be reused. "
                           f"Rerun it with force={Path(cell_dir).name}, or use another results_dir") from e
    if not isinstance(stored, dict):
        raise CellConflict(f"cell {Path(cell_dir).name}: {path} holds no config, so it cannot be shown to match "
                           f"the requested one. Rerun it with force={Path(cell_dir).name}, or use another results_dir")
    version = summary.get(VERSION_KEY, 1) if isinstance(summary, dict) else 1
    if version not in VERSIONS:
        raise CellConflict(f"cell {Path(cell_dir).name} was measured under identity version {version!r}, which this "
                           f"release does not know (known: {VERSIONS}); it cannot be shown to match. Rerun it with "
                           f"force={Path(cell_dir).name}, or use another results_dir")
    diff = differences(stored, cfg, version)
    if diff:
        shown = "; ".join(diff[:8]) + (f"; ... ({len(diff)} keys)" if len(diff) > 8 else "")
        raise CellConflict(f"cell {Path(cell_dir).name} finished under a different configuration ({shown}). "
                           f"Rerun it with force={Path(cell_dir).name} (or force=corrupt: every such cell), "
                           "or use another results_dir")
