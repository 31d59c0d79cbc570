"""``harness-report``: turn the cells under ``results/`` into answers.

Reads ``results/`` and writes nothing there. Writes ``<out>/cells.parquet`` and ``<out>/records.parquet`` (every
finished cell, each with its CSV) and ``<out>/results.json``, the analysis tables
(``<out>/tables/*.parquet``), the figures (``<out>/plots/*.png``), and a report: ``<out>/index.html``
(self-contained: figures embedded, opens from disk) and ``<out>/report.md``. The report arranges what
:mod:`harness.analysis` computes — paired speed-up and energy ratios with CIs, quality, Pareto fronts per
decoding regime, iso-quality ratios, the papers' tables as they print them, theory checks, acceptance
diagnostics — with provenance and a measurement-quality section. It never imports decoder code or torch.

Sections, one module each: :mod:`.sections` (overview, speed, energy, quality), :mod:`.papers` (the papers'
tables), :mod:`.diagnostics` (iso-quality, theory, acceptance, oracle, measurement, provenance); :mod:`.doc`
renders, :mod:`.build` computes and writes, :mod:`.cli` is the command line.
``harness-report --export specbench DIR`` writes each cell as a Spec-Bench answer file instead.
"""
from harness.analysis.labels import short_labels
from harness.report.build import build_report, load_results, write_parquet
from harness.report.cli import console_table, main

__all__ = ["build_report", "console_table", "load_results", "main", "short_labels", "write_parquet"]
