"""``harness-report``: read every finished cell under ``results/`` into pandas tables
(``results/cells.parquet``, ``results/records.parquet``) and draw the plots into ``plots/``.

Only cells with a ``summary.json`` (finished) are read, so a killed or failed cell never
contributes a partial row; failed cells are listed separately.
"""
from __future__ import annotations

import argparse
import json
from pathlib import Path

import pandas as pd

from harness import store


def method_label(params: dict) -> str:
    """``name(k=v, ...)`` over the decoder's parameters (not facts a decoder adds to ``describe()``,
    such as a library version): identifies the method exactly, defaults included."""
    import dataclasses

    from harness.decoders import registry

    params = dict(params)
    name = params.pop("method")
    cls = registry().get(name)
    if cls is not None:
        fields = [f.name for f in dataclasses.fields(cls.Params)]
        params = {k: params[k] for k in fields if k in params}
    return name + ("(" + ", ".join(f"{k}={v}" for k, v in params.items()) + ")" if params else "")


def short_labels(cells: pd.DataFrame) -> pd.Series:
    """Plot labels: the method name plus only the parameters that vary among that method's cells."""
    labels = cells["method_name"].astype(str).copy()
    param_cols = [c for c in cells.columns if c.startswith("param.")]
    for name, group in cells.groupby("method_name"):
        varying = [c for c in param_cols if group[c].astype(str).nunique() > 1]
        if varying:
            labels[group.index] = [name + "(" + ", ".join(f"{c[6:]}={row[c]}" for c in varying) + ")"
                                   for _, row in group.iterrows()]
    return labels


def _flat(prefix: str, d: dict) -> dict:
    out = {}
    for k, v in d.items():
        key = f"{prefix}{k}"
        if isinstance(v, dict):
            out.update(_flat(key + ".", v))
        else:
            out[key] = v
    return out


def load_results(results_dir: str | Path = "results") -> tuple[pd.DataFrame, pd.DataFrame, pd.DataFrame]:
    """(cells, records, failures) for every cell folder under ``results_dir/cells``."""
    cells, records, failures = [], [], []
    for cell_dir in sorted((Path(results_dir) / "cells").glob("*")):
        if store.is_finished(cell_dir):
            summary = json.loads((cell_dir / store.SUMMARY).read_text())
            cfg = summary.pop("config")
            row = {k: v for k, v in summary.items() if not isinstance(v, dict)}
            row.update(_flat("env.", summary.get("env", {})))
            row.update(_flat("energy_meter.", summary.get("energy_meter", {})))
            row.update(_flat("param.", {k: v for k, v in summary["decoder_params"].items() if k != "method"}))
            row.update({"method": method_label(summary["decoder_params"]), "pair": cfg["pair"]["name"],
                        "dataset": cfg["dataset"]["name"], "gpu": cfg["gpu"]["name"], "seed": cfg["seed"]})
            cells.append(row)
            for rec in store.read_records(cell_dir):
                rec.update({k: row[k] for k in ("method", "method_name", "pair", "dataset", "gpu", "seed")})
                records.append(rec)
        elif (cell_dir / store.ERROR).is_file():
            err = json.loads((cell_dir / store.ERROR).read_text())
            failures.append({"cell_id": err["cell_id"], "kind": err["kind"], "error": err["error"], "at": err["at"]})
    return _numeric(pd.DataFrame(cells)), _numeric(pd.DataFrame(records)), pd.DataFrame(failures)


def _numeric(df: pd.DataFrame) -> pd.DataFrame:
    """JSON stores NaN as null: columns holding only numbers and nulls become float columns (NaN)."""
    for col in df.columns:
        values = df[col]
        if values.dtype == object and values.map(
                lambda v: v is None or (isinstance(v, (int, float)) and not isinstance(v, bool))).all():
            df[col] = pd.to_numeric(values, errors="coerce")
    return df


def plot_tokens_per_s(cells: pd.DataFrame, records: pd.DataFrame, plots_dir: Path) -> Path:
    """Bar chart of tokens/s per method (ratio of totals over all prompts and seeds), with the
    spread of per-prompt tokens/s as error bars; one panel per pair × dataset × gpu."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    cells = cells.assign(label=short_labels(cells))
    records = records.merge(cells[["cell_id", "label"]], on="cell_id", how="left")
    groups = list(cells.groupby(["pair", "dataset", "gpu"]))
    fig, axes = plt.subplots(len(groups), 1, figsize=(9, 1.2 + 0.45 * max(len(g) for _, g in groups) * len(groups)),
                             squeeze=False)
    for ax, ((pair, dataset, gpu), g) in zip(axes[:, 0], groups):
        agg = g.groupby("label")[["new_tokens", "wall_time_s"]].sum()
        rate = (agg["new_tokens"] / agg["wall_time_s"]).sort_values()
        recs = records[(records.pair == pair) & (records.dataset == dataset) & (records.gpu == gpu)]
        spread = recs.groupby("label")["tokens_per_s"].std().reindex(rate.index)
        ax.barh(rate.index, rate.values, xerr=spread.fillna(0).values, color="tab:blue", alpha=0.8, capsize=3)
        for y, v in enumerate(rate.values):
            ax.text(v * 0.02, y, f"{v:.1f}", va="center", fontsize=8, color="white")
        ax.set_title(f"pair={pair}  dataset={dataset}  gpu={gpu}", fontsize=10)
        ax.set_xlabel("tokens / s (total new tokens ÷ total wall time; bars: ±1 s.d. over prompts)")
    fig.tight_layout()
    plots_dir.mkdir(parents=True, exist_ok=True)
    path = plots_dir / "tokens_per_s.png"
    fig.savefig(path, dpi=120)
    plt.close(fig)
    return path


SUMMARY_COLUMNS = ["method", "pair", "dataset", "gpu", "seed", "prompts", "new_tokens", "tokens_per_s",
                   "block_efficiency", "acceptance_rate", "output_ppl", "energy.j_per_token"]


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(prog="harness-report", description=__doc__.split("\n\n")[0])
    ap.add_argument("--results", default="results", help="results folder written by `harness` (default: results)")
    ap.add_argument("--plots", default="plots", help="where to write plots (default: plots)")
    args = ap.parse_args(argv)
    cells, records, failures = load_results(args.results)
    if cells.empty:
        print(f"harness-report: no finished cells under {args.results}/cells — run `harness` first")
        return 1
    out = Path(args.results)
    cells.to_parquet(out / "cells.parquet", index=False)
    records.to_parquet(out / "records.parquet", index=False)
    plot = plot_tokens_per_s(cells, records, Path(args.plots))
    cols = [c for c in SUMMARY_COLUMNS if c in cells.columns]
    table = cells.assign(method=short_labels(cells))[cols].sort_values(["pair", "dataset", "method", "seed"])
    with pd.option_context("display.width", 200, "display.max_columns", 20, "display.float_format", "{:.3g}".format):
        print(table.to_string(index=False))
    print(f"\n{len(cells)} cells, {len(records)} records -> {out / 'cells.parquet'}, {out / 'records.parquet'}")
    print(f"plot -> {plot}")
    if not failures.empty:
        print(f"\n{len(failures)} failed cell(s) (rerun `harness` to retry them):")
        print(failures.to_string(index=False))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
