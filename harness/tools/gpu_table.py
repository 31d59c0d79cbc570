"""The markdown table of a prepared GPU run (:mod:`harness.tools.gpu_run`): one row per pair × method × execution
mode — tokens/s, the speed-up over AR of the same mode with its bootstrap CI (interleaved cells, paired prompts:
:func:`harness.analysis.paired.paired_ratios`), the HF parity ratio (:mod:`harness.tools.gpu_parity`), the fraction
of the 7B shape's measured-bandwidth roofline, and J/token gross and net (the energy meter's; NaN with the meter
off). Headed by device, date and commit; followed by the steps that failed or were skipped."""
from __future__ import annotations

import datetime as dt
import math
from pathlib import Path

NAN = math.nan


def _fmt(v, digits: int = 2) -> str:
    try:
        v = float(v)
    except (TypeError, ValueError):
        return "—"
    return "—" if not math.isfinite(v) else f"{v:.{digits}f}"


def _ci(point, lo, hi) -> str:
    return f"{_fmt(point)} [{_fmt(lo)}, {_fmt(hi)}]" if math.isfinite(float(point)) else "—"


def header(doc: dict) -> list[str]:
    import torch

    from harness.run.runner import git_sha

    device = torch.cuda.get_device_name(0) if torch.cuda.is_available() \
        else "CPU (no GPU: a dry run, not a measurement)"
    return [f"**Device:** {device} · **date:** {dt.datetime.now(dt.timezone.utc):%Y-%m-%d %H:%M} UTC · "
            f"**commit:** {git_sha() or 'unknown'} · torch {torch.__version__}"
            + (" · **dry run**" if doc.get("dry_run") else ""), ""]


def _hf_ratio(doc: dict, pair: str, method: str, mode: str) -> str:
    for step in ("parity_tiny", "parity_7b_shape"):
        res = doc["steps"].get(step) or {}
        if res.get("pair") != pair:
            continue
        key = {"ar_greedy": f"ar/{mode} ÷ hf_generate", "sd": f"sd/{mode} ÷ hf_assisted"}.get(method)
        r = (res.get("ratios") or {}).get(key)
        return _ci(r["ratio"], r["lo"], r["hi"]) if r else "—"
    return "—"


def _roofline(doc: dict, pair: str) -> float:
    res = doc["steps"].get("parity_7b_shape") or {}
    roof = (res.get("roofline") or {}).get("roofline_tokens_per_s")
    return float(roof) if res.get("pair") == pair and roof else NAN


def rows(out: Path, doc: dict) -> list[str]:
    from harness.analysis.load import read_results
    from harness.analysis.paired import paired_ratios

    res = read_results(out / "results")
    cells = res.cells
    if cells.empty:
        return ["(no finished cells)"]
    ratios = paired_ratios(res.records, cells)
    overall = ratios[ratios["category"] == "overall"].set_index("cell_id") if len(ratios) else None
    lines = ["| pair | method | mode | tok/s | speed-up over AR [95% CI] | HF ratio [95% CI] | roofline fraction "
             "| J/token gross | J/token net |", "|---|---|---|---|---|---|---|---|---|"]
    cells = cells.assign(_base=cells["pair"].astype(str).str.replace(r" \[\w+\]$", "", regex=True),
                         execution=cells.get("execution", "eager"))
    for _, c in cells.sort_values(["_base", "method_name", "execution"]).iterrows():
        tps = float(c.get("tokens_per_s", NAN))
        speed = "—"
        if overall is not None and c["cell_id"] in overall.index:
            r = overall.loc[c["cell_id"]]
            speed = "1 (baseline)" if r.get("baseline_cell_id") == c["cell_id"] else _ci(
                r.get("speedup", NAN), r.get("speedup_lo", NAN), r.get("speedup_hi", NAN))
        lines.append(f"| {c['_base']} | {c['label']} | {c['execution']} | {_fmt(tps, 1)} | {speed} | "
                     f"{_hf_ratio(doc, c['_base'], c['method_name'], c['execution'])} | "
                     f"{_fmt(tps / _roofline(doc, c['_base']))} | {_fmt(c.get('energy.j_per_token', NAN), 3)} | "
                     f"{_fmt(c.get('energy.net_j_per_token', NAN), 3)} |")
    return lines


def render(out: Path, doc: dict) -> str:
    """The markdown for the README's "Measured on GPUs" (plus the run's notes)."""
    lines = header(doc)
    try:
        lines += rows(Path(out), doc)
    except Exception as e:  # noqa: BLE001 — a run without results still reports its steps
        lines.append(f"(no table: {type(e).__name__}: {e})")
    big = doc["steps"].get("parity_7b_shape") or {}
    if big.get("roofline"):
        rf = big["roofline"]
        lines += ["", f"Roofline ({big['pair']}): {rf['weight_bytes'] / 1e9:.2f} GB of weights ÷ "
                      f"{rf['copy_bandwidth_gbs']:.0f} GB/s measured copy bandwidth = "
                      f"{rf['roofline_tokens_per_s']:.1f} tok/s; AR in the parity run: "
                      + ", ".join(f"{m} {f:.0%}" for m, f in rf["ar_fraction"].items()) + "."]
    for name, step in doc["steps"].items():
        if not step.get("ok"):
            lines.append(f"- step {name}: {step.get('skipped') or step.get('error') or 'rc ' + str(step.get('rc'))}"
                         + (f" (log: {step['log']})" if step.get("log") else ""))
        if step.get("left_out"):
            lines.append(f"- {name} left out: " + "; ".join(f"{m} ({why})" for m, why in step["left_out"].items()))
    lines.append(f"\nRun time {doc.get('elapsed_s', NAN)} s. Speed-ups are within one mode (AR of that mode is the "
                 "baseline); eager and graphs cells ran as separate interleaved groups.")
    return "\n".join(lines) + "\n"
