"""``harness-report``: the command line. It never destroys work: a results folder without cell folders
(a mistyped ``--results``) is exit 2 with nothing written; results without a finished cell write no report
(exit 1, the problems printed); a report folder built from another results folder is not overwritten
(exit 2) unless ``--force``; and the default report folder is named after its results folder, so two
results folders in one parent never share one."""
from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path

import pandas as pd

from harness.analysis import specbench, stats
from harness.analysis.labels import lossless_text
from harness.analysis.load import read_results
from harness.analysis.specs import SpecError, parse_baseline, parse_pair
from harness.report.build import MARKER, build_report, write_parquet
from harness.report.doc import ci, g
from harness.report.papers import PAPERS

DESCRIPTION = "Turn the cells under results/ into answers: report/index.html, report/report.md, tables, figures."


def console_table(summary: pd.DataFrame, ratios: pd.DataFrame) -> pd.DataFrame:
    """The headline numbers per cell, for the terminal (a decoding column: regimes are never mixed unmarked)."""
    o = ratios[ratios["category"] == "overall"].set_index("cell_id")
    rows = []
    for _, s in summary.sort_values(["pair", "dataset", "regime", "label", "seed"]).iterrows():
        r = o.loc[s["cell_id"]] if s["cell_id"] in o.index else {}
        rows.append({"method": s["label"], "decoding": s["regime"], "pair": s["pair"], "dataset": s["dataset"],
                     "gpu": s["gpu"], "seed": s["seed"], "lossless": lossless_text(s.get("lossless")),
                     "tokens/s": g(s["tokens_per_s"]), "speed-up [95% CI]": ci(r, "speedup") if len(r) else "n/a",
                     "block eff.": g(s["block_efficiency"]), "acceptance": g(s["acceptance_rate"]),
                     "ppl": g(s["output_ppl"]), "J/token": g(s["j_per_token"]),
                     "net J/token": g(s.get("net_j_per_token", float("nan"))) + (
                         " (idle-dominated)" if s.get("idle_dominated") is True else ""),
                     "interleaved": "yes" if bool(s.get("interleaved", False)) else "no"})
    return pd.DataFrame(rows)


def default_out(results: str | Path) -> Path:
    """``report/`` beside a folder named ``results``; ``report_<name>/`` beside any other, so that two results
    folders in one parent get two reports."""
    res = Path(results).resolve()
    return res.parent / ("report" if res.name == "results" else f"report_{res.name}")


def _parser() -> argparse.ArgumentParser:
    ap = argparse.ArgumentParser(prog="harness-report", description=DESCRIPTION)
    ap.add_argument("--results", default="results", help="results folder written by `harness` (default: results)")
    ap.add_argument("--out", default=None,
                    help="report folder: index.html, report.md, tables/ (default: report/ beside "
                                                "a folder named results, else report_<name>/ beside it)")
    ap.add_argument("--plots", default=None, help="where to write the PNG figures (default: <out>/plots)")
    ap.add_argument("--baseline", action="append", metavar="MODE=SPEC",
                    help="baseline per decoding mode, a method spec, e.g. 'sampling=sd[gamma=4,gamma_policy=fixed]' "
                         "(default: the cells' report.baselines, else greedy=ar_greedy, sampling=ar_sampling)")
    ap.add_argument("--iso", action="append", metavar="A:B",
                    help="family pair for iso-quality ratios, each a method spec, e.g. "
                         "'dsbd[memory_constrained=false]:beam_sampling' (default: the cells' report.iso, else the "
                         "papers' headline pairs and every pair of swept methods)")
    ap.add_argument("--tables", action="append", choices=PAPERS,
                    help="a paper's tables to produce (default: the cells' report.tables, else every paper whose "
                         "methods are in the results)")
    ap.add_argument("--grid-intensity", metavar="REGION=G",
                    help="the grid's carbon intensity for every cell's CO₂ figures, gCO₂eq/kWh, e.g. FR=56 (default: "
                         "the cells' report.carbon, else world=475)")
    ap.add_argument("--bootstrap", type=int, default=stats.N_RESAMPLES, help="bootstrap resamples (default: 2000)")
    ap.add_argument("--force", action="store_true", help="overwrite a report folder built from another results folder")
    ap.add_argument("--export", nargs=2, metavar=("FORMAT", "DIR"),
                    help="write the cells in another benchmark's format instead: specbench DIR")
    return ap


def _check_out(out: Path, results: Path, force: bool) -> str | None:
    marker = out / MARKER
    if force or not marker.is_file():
        return None
    try:
        built_from = json.loads(marker.read_text()).get("results")
    except (OSError, ValueError):
        built_from = None
    if built_from and Path(built_from) != results.resolve():
        return (f"{out} holds the report of another results folder ({built_from}); choose another --out, or pass "
                "--force to overwrite it")
    return None


def _export(args) -> int:
    fmt, directory = args.export
    res = read_results(args.results)
    if res.cells.empty:
        print(f"harness-report: no finished cells under {args.results}/cells — run `harness` first")
        return 1
    try:
        paths = specbench.export(res.records, res.cells, directory)
    except OSError as e:  # a full disk, a read-only folder, a path through a file
        print(f"harness-report: cannot write the Spec-Bench files to '{directory}': {e.strerror or e} "
              f"({e.filename or directory})", file=sys.stderr)
        return 1
    print(f"{len(paths)} Spec-Bench answer files -> {directory}/<cell id>.jsonl")
    return 0


def _options(ap, args) -> tuple[dict, list]:
    try:
        baselines = dict(parse_baseline(b) for b in args.baseline or [])
        iso = [parse_pair(x) for x in args.iso or []]
    except SpecError as e:
        ap.error(str(e))
    return {k: str(v) for k, v in baselines.items()}, [f"{a}:{b}" for a, b in iso]


def _grid(ap, text: str | None) -> tuple[str, float] | None:
    """``REGION=G`` → (region, gCO₂eq/kWh); a malformed one is a usage error (exit 2)."""
    if text is None:
        return None
    region, _, value = text.partition("=")
    try:
        g = float(value)
    except ValueError:
        g = -1.0
    if not region or not g >= 0 or g == float("inf"):
        ap.error(f"--grid-intensity must be REGION=G with G a number >= 0 (gCO₂eq/kWh), e.g. FR=56; got {text!r}")
    return region, g


def main(argv: list[str] | None = None) -> int:
    ap = _parser()
    args = ap.parse_args(argv)
    if args.export:
        if args.export[0] != "specbench":
            ap.error(f"--export FORMAT must be 'specbench', got '{args.export[0]}'")
        if Path(args.export[1]).exists() and not Path(args.export[1]).is_dir():
            ap.error(f"--export specbench DIR: '{args.export[1]}' is an existing file, not a folder (nothing written)")
        return _export(args)
    if args.bootstrap < 100:
        ap.error(f"--bootstrap must be >= 100, got {args.bootstrap}")
    baselines, iso = _options(ap, args)
    grid = _grid(ap, args.grid_intensity)
    results = Path(args.results)
    cell_dirs = [p for p in (results / "cells").glob("*") if p.is_dir()]
    if not cell_dirs:
        print(f"harness-report: {results} has no cell folders ({results}/cells/<cell id>/): is --results mistyped? "
              "Nothing written.")
        return 2
    out_dir = Path(args.out) if args.out else default_out(results)
    problem = _check_out(out_dir, results, args.force)
    if problem:
        print(f"harness-report: {problem}. Nothing written.")
        return 2
    res = read_results(results)
    if res.cells.empty:
        print(f"harness-report: no finished cells under {results}/cells — run `harness` first (no report written):")
        print(res.problems[["cell_id", "problem", "kind", "error"]].to_string(index=False))
        return 1
    out = build_report(results, out_dir, args.plots, baselines, iso, args.bootstrap, args.tables, results=res,
                       grid=grid)
    _print_summary(out, results, out_dir, argv)
    return 0


def _print_summary(out: dict, results: Path, out_dir: Path, argv: list[str] | None) -> None:
    """The exports go to the report folder (``cells.parquet``, ``records.parquet``, each with its CSV, and
    ``results.json``): the results folder is ``harness``'s, and a report only reads it (issue 33.5)."""
    from harness.results.provenance import write_results_json

    cells = out["cells"]
    for name, df in (("cells", cells), ("records", out["records"])):
        write_parquet(df, out_dir / f"{name}.parquet")  # and its CSV beside it
    write_results_json(results, list(cells["cell_id"]), {"argv": ["harness-report", *(argv or sys.argv[1:])]},
                       out_dir=out_dir)
    print(console_table(out["summary"], out["ratios"]).to_string(index=False))
    print(f"\n{len(cells)} cells, {len(out['records'])} records -> {out_dir / 'cells.parquet'}, "
          f"{out_dir / 'records.parquet'} (and .csv)")
    if len(out["excluded"]):
        print(f"{int(out['excluded']['records'].sum())} fit-phase record(s) of draft selection excluded from every "
              f"figure ({len(out['excluded'])} cell(s))")
    print(f"report -> {out['html']} and {out['md']} ({len(out['plots'])} figures, {len(out['tables'])} tables)")
    trust = out["analysis"].trust
    if trust is not None and trust.notes:
        print(f"⚠ {len(trust.notes)} comparison(s) to distrust (different load, a resume, totals vs geometric mean): "
              + "; ".join(f"{cid}: {trust.note(cid)}" for cid in list(trust.notes)[:3])
              + (" …" if len(trust.notes) > 3 else "") + " — see 'Measurement quality'")
    if not out["problems"].empty:
        print(f"\n{len(out['problems'])} cell(s) not used (rerun `harness` to retry failed/incomplete ones):")
        print(out["problems"][["cell_id", "problem", "kind", "error"]].to_string(index=False))
