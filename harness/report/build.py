"""Compute every analysis once and arrange the sections into a document; write HTML, Markdown, figures and
the analysis tables (parquet)."""
from __future__ import annotations

import json
import os
from datetime import datetime, timezone
from pathlib import Path

import pandas as pd

from harness.analysis import acceptance, checks, oracle, paired, quality, stats, trust
from harness.analysis.load import Results, read_results
from harness.report import diagnostics, footprint, papers, sections
from harness.report.context import Analysis, run_section
from harness.report.doc import Doc

MARKER = "report.json"  # which results folder a report folder was built from


def load_results(results_dir: str | Path = "results") -> tuple[pd.DataFrame, pd.DataFrame, pd.DataFrame]:
    """(cells, records, failures) for every cell folder under ``results_dir/cells``; ``failures``
    lists failed, incomplete and unreadable cells (columns ``cell_id, problem, kind, error, at``)."""
    r = read_results(results_dir)
    return r.cells, r.records, r.problems


def _compute(a: Analysis) -> None:
    boot = a.boot
    a.ratios = paired.paired_ratios(a.records, a.cells, a.options.get("baselines"), **boot)
    a.summary = quality.cell_summary(a.records, a.cells, **boot)
    a.trust = trust.assess(a.records, a.ratios, a.cells)
    a.tables["host_conditions"] = a.trust.conditions
    a.tables.update(paired_ratios=a.ratios, cell_summary=a.summary,
                    acceptance=acceptance.per_request_vs_pooled(a.records, **boot))
    a.options["paper_tables"] = papers.wanted(a)
    a.options["paper_docs"] = papers.render(a)  # only the papers (and tables) whose experiment's cells are here
    try:
        sweeps, comparisons = oracle.oracle_tables(a.cells, a.records, **boot)
    except Exception as e:  # noqa: BLE001 — reported like any failing section
        sweeps, comparisons = pd.DataFrame(), pd.DataFrame()
        a.section_errors.append({"severity": "error", "kind": "analysis failed", "cell_id": "",
                                 "detail": f"fixed-γ oracle: {type(e).__name__}: {e}"})
    if not sweeps.empty:
        a.tables.update(oracle_sweeps=sweeps, oracle_comparisons=comparisons)


SECTIONS = (("Speed-ups against the baseline (paired)", sections.sec_speed), ("Energy", sections.sec_energy),
            ("CO₂ beside J/token", footprint.sec_carbon), ("Memory", footprint.sec_memory),
            ("Quality and Pareto fronts", sections.sec_quality), ("The papers' tables", papers.sec_papers),
            ("Iso-quality comparisons", diagnostics.sec_iso), ("Latency percentiles", diagnostics.sec_latency),
            ("Theory checks", diagnostics.sec_theory),
            ("Acceptance diagnostics", diagnostics.sec_acceptance))


def document(a: Analysis, results_dir) -> tuple[Doc, pd.DataFrame]:
    """The report's blocks, and the measurement-quality flags."""
    doc = Doc()
    if not a.cells.empty:
        _compute(a)
        sections.banners(doc, a)
        doc.h(2, "Overview")
        run_section(doc, a, "overview", sections.sec_overview)
        for title, fn in SECTIONS:
            part = Doc()
            if run_section(part, a, title, fn) is False:  # nothing to show: no heading either (issue 33.3)
                continue
            doc.h(2, title)
            doc.blocks += part.blocks
            doc.images.update(part.images)
        if "oracle_sweeps" in a.tables:
            doc.h(2, "Fixed-γ oracle and adaptive γ (adaptive §3)")
            run_section(doc, a, "fixed-γ oracle", diagnostics.sec_oracle)
    else:
        doc.p(f"No finished cell under {results_dir}/cells.")
    flags = checks.measurement_flags(a.cells, a.records, a.problems, a.ratios) if not a.cells.empty else \
        checks.measurement_flags(pd.DataFrame(columns=["cell_id"]), pd.DataFrame(), a.problems)
    extra = [a.trust.flags] if a.trust is not None and not a.trust.flags.empty else []
    flags = pd.concat([flags, *extra, pd.DataFrame(a.section_errors, columns=flags.columns)], ignore_index=True)
    doc.h(2, "Measurement quality")
    diagnostics.sec_measurement(doc, a, flags)
    if not a.cells.empty:
        doc.h(2, "Provenance")
        run_section(doc, a, "provenance", diagnostics.sec_provenance)
    a.tables["measurement_flags"] = flags
    return doc, flags


def build_report(results_dir: str | Path, out_dir: str | Path, plots_dir: str | Path | None = None,
                 baselines: dict | None = None, iso_pairs=None, n_resamples: int = stats.N_RESAMPLES,
                 tables: list[str] | None = None, results: Results | None = None,
                 grid: tuple[str, float] | None = None) -> dict:
    """Compute everything and write the report; returns {"html", "md", "tables", "plots", "cells", ...}.
    ``baselines``: {decoding kind: method spec}; ``iso_pairs``: "A:B" texts; ``tables``: papers (dsbd, mtad,
    mcsd, adaptive) — each default: the cells' configs' ``report`` node; ``grid``: (region, gCO₂eq/kWh) for every
    cell's CO₂ figures instead of its ``report.carbon``."""
    res = results if results is not None else read_results(results_dir)
    out_dir = Path(out_dir)
    plots_dir = Path(plots_dir) if plots_dir else out_dir / "plots"
    a = Analysis(res.cells, res.records, res.problems, res.excluded,
                 options={"baselines": baselines, "iso": [":".join(map(str, p)) if isinstance(p, tuple) else p
                                                           for p in iso_pairs or []],
                          "tables": tables, "n_resamples": n_resamples, "grid": grid,
                          "excluded_counts": res.excluded_counts()})
    doc, flags = document(a, results_dir)
    out_dir.mkdir(parents=True, exist_ok=True)
    plots_dir.mkdir(parents=True, exist_ok=True)
    for name, png in doc.images.items():
        (plots_dir / f"{name}.png").write_bytes(png)
    stamp = datetime.now(timezone.utc).isoformat(timespec="seconds")
    title = f"Decoding benchmark report — {Path(results_dir).resolve().name} ({stamp})"
    html_path, md_path = out_dir / "index.html", out_dir / "report.md"
    html_path.write_text(doc.html(title), encoding="utf-8")
    md_path.write_text(f"# {title}\n\n" + doc.markdown(os.path.relpath(plots_dir, out_dir)), encoding="utf-8")
    (out_dir / MARKER).write_text(json.dumps({"results": str(Path(results_dir).resolve()), "built": stamp}) + "\n")
    table_dir = out_dir / "tables"
    table_dir.mkdir(exist_ok=True)
    written = [write_parquet(df, table_dir / f"{name}.parquet") for name, df in a.tables.items()
               if isinstance(df, pd.DataFrame) and not df.empty]
    return {"html": html_path, "md": md_path, "tables": written, "plots": sorted(plots_dir.glob("*.png")),
            "cells": a.cells, "records": a.records, "problems": a.problems, "flags": flags, "summary": a.summary,
            "ratios": a.ratios, "excluded": res.excluded_counts(), "analysis": a}


def _as_json(frame: pd.DataFrame) -> pd.DataFrame:
    frame = frame.copy()
    for c in frame.columns:
        if frame[c].dtype == object:
            frame[c] = frame[c].map(lambda v: v if v is None or isinstance(v, str) else json.dumps(v, default=str))
    return frame


def write_parquet(df: pd.DataFrame, path: Path) -> Path:
    """Parquet, with columns pyarrow cannot type (mixed objects, dicts) written as JSON text; and the same
    table as CSV beside it (``<name>.csv``: lists and dicts as JSON text) for spreadsheets and other tools."""
    try:
        df.to_parquet(path, index=False)
    except Exception:  # noqa: BLE001 — pyarrow's errors for mixed object columns vary by type
        _as_json(df).to_parquet(path, index=False)
    _as_json(df).to_csv(Path(path).with_suffix(".csv"), index=False)
    return path
