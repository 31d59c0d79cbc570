"""The one table of renamed record and summary fields: results written before a rename still load.

Every reader of result files maps old names to the current ones here (:func:`current_names`, applied by
:func:`harness.store.read_records` and the analysis loader), so no other module knows an old name.

Current names, where two fields once shared a vocabulary but not a scope: ``new_tokens`` counts the tokens of
one generation, while an energy reading may run the workload several times (``energy.repetitions``); the
energy fields say which they mean — ``energy.energy_per_run_j`` / ``energy.net_energy_per_run_j`` (one run),
``energy.energy_all_runs_j`` and ``energy.tokens_all_runs`` (every measured run; J/token is their ratio).
"""
from __future__ import annotations

from typing import Any, Mapping

#: old name -> current name (records and summaries)
RENAMED: dict[str, str] = {
    "iterations": "rounds",
    "drafted_tokens": "draft_nodes",
    "energy.energy_j": "energy.energy_per_run_j",
    "energy.net_energy_j": "energy.net_energy_per_run_j",
    "energy.total_energy_j": "energy.energy_all_runs_j",
    "energy.tokens": "energy.tokens_all_runs",
}
#: the energy reading's own field names (:meth:`harness.energy.reading.EnergyReading.as_record`) -> record names
ENERGY_FIELDS: dict[str, str] = {old: new for old, new in RENAMED.items() if old.startswith("energy.")}


def current_names(fields: Mapping[str, Any]) -> dict[str, Any]:
    """The fields under their current names (a current name already present wins over its old one)."""
    out = dict(fields)
    for old, new in RENAMED.items():
        if old in out:
            value = out.pop(old)
            out.setdefault(new, value)
    return out


def energy_record(reading_fields: Mapping[str, Any]) -> dict[str, Any]:
    """An energy reading's ``energy.*`` fields under the record's (scoped) names."""
    return {ENERGY_FIELDS.get(k, k): v for k, v in reading_fields.items()}


def reading_fields(record: Mapping[str, Any]) -> dict[str, Any]:
    """A record's ``energy.*`` fields under the energy reading's own names (what its summaries read)."""
    back = {new: old for old, new in ENERGY_FIELDS.items()}
    return {back.get(k, k): v for k, v in record.items() if k.startswith("energy.")}
