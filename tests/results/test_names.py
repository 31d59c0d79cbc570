"""Issue 29.3: renamed fields are renamed at the source. The energy reading carries the record's names (no table
translating new -> old -> new around the summary); only the file readers and the CLI's override rewriting know
release 0.2's names (harness.config.legacy)."""
import ast
import dataclasses
from pathlib import Path

from harness.config.legacy import RENAMED
from harness.energy import EnergyReading, summarize_records
from harness.results.record import CellSummary

HARNESS = Path(__file__).resolve().parents[2] / "harness"


def test_the_energy_reading_speaks_the_record_s_names():
    fields = {f"energy.{f.name}" for f in dataclasses.fields(EnergyReading)}
    record = EnergyReading(energy_per_run_j=2.0, net_energy_per_run_j=1.0, energy_all_runs_j=8.0, repetitions=4,
                           measured_s=1.0).as_record(new_tokens=16)
    for old, new in RENAMED.items():
        if old.startswith("energy."):
            assert old not in fields and old not in record, old
            assert new in record, new
    assert record["energy.tokens_all_runs"] == 16 and record["energy.j_per_token"] == 0.5


def test_the_summary_reads_the_records_as_written():
    rec = EnergyReading(source="nvml-counter", energy_per_run_j=2.0, net_energy_per_run_j=1.0, energy_all_runs_j=8.0,
                        repetitions=4, measured_s=1.0, coverage=1.0).as_record(new_tokens=16)
    summary = CellSummary.of([{**rec, "new_tokens": 16, "wall_time_s": 1.0}], summarize_records, identity={},
                             run={}, integrity={})
    assert summary.energy["energy.energy_all_runs_j"] == 8.0 and summary.energy["energy.j_per_token"] == 0.5
    assert not set(summary.energy) & set(RENAMED)


def _importers(module: str) -> set[str]:
    out = set()
    for path in HARNESS.rglob("*.py"):
        for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
            names = [node.module] if isinstance(node, ast.ImportFrom) and node.module else \
                [a.name for a in node.names] if isinstance(node, ast.Import) else []
            if isinstance(node, ast.ImportFrom) and node.module == "harness.config":
                names = [f"harness.config.{a.name}" for a in node.names]
            if module in names:
                out.add(str(path.relative_to(HARNESS)))
    return out


def test_the_record_and_the_energy_package_know_no_old_name():
    importers = _importers("harness.config.legacy")
    assert "results/record.py" not in importers
    assert not {p for p in importers if p.startswith("energy/")}
