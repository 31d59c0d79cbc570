"""From measurements to answers: pure functions over the pandas tables the store produces.

One module per concern; every function takes and returns pandas tables (or plain numbers)
and never imports decoder code or torch:

* :mod:`~harness.analysis.load` — result folders → (cells, records, problems) tables; one bad
  cell becomes a row in ``problems``, never an exception;
* :mod:`~harness.analysis.tables` — a cell's row from its summary (parameters, decoding mode,
  labels), old field names mapped to the record contract's names;
* :mod:`~harness.analysis.stats` — percentile bootstrap CIs over prompts, mean ± s.d. over seeds;
* :mod:`~harness.analysis.paired` — baselines and paired speed-up / energy ratios;
* :mod:`~harness.analysis.quality` — per-cell quality and cost with CIs;
* :mod:`~harness.analysis.pareto` — Pareto fronts and iso-quality ratios between method families;
* :mod:`~harness.analysis.theory` — α by MLE, SD's expected tokens per call and speed-up, DSBD
  Theorem 3.2;
* :mod:`~harness.analysis.acceptance` — accept-length histograms, per-position conditional
  acceptance, per-request vs pooled means;
* :mod:`~harness.analysis.checks` — provenance and the measurement-quality flags;
* :mod:`~harness.analysis.paper` — DSBD- and MTAD-style tables (Markdown, LaTeX);
* :mod:`~harness.analysis.oracle` — fixed-γ sweeps: best γ per dataset and per prompt (adaptive §3),
  adaptive γ policies against them;
* :mod:`~harness.analysis.plots` — matplotlib figures (Agg);
* :mod:`~harness.analysis.specbench` — Spec-Bench answer files.

``harness-report`` (:mod:`harness.report`) only arranges their outputs.
"""
