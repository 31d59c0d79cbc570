"""Which term dominates the polled bound (issue 30.3): per study scenario, the median over prompts of each
term of the statement's quadrature (relative, 99 % figures), beside the median |error| — on the simulator.

    python scripts/diag_polled_bound.py [--seeds 1] [--prompts 6] [--only NAME]
"""
from __future__ import annotations

import argparse
import math
import statistics
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
sys.path.insert(0, str(Path(__file__).resolve().parent))

import study_energy_accuracy as study  # noqa: E402
from harness.energy import make_energy_meter, polled  # noqa: E402


def capture(records: list[dict]):
    """Wrap the polled path's term and idle functions: one record per reading."""
    terms, energies = polled.bound_terms, polled._trial_energies

    def bound_terms(state, trials, refreshes, powers, stats, seconds, mean_p, finite):
        out = terms(state, trials, refreshes, powers, stats, seconds, mean_p, finite)
        total = mean_p * sum(seconds)
        moved = sum(t.tail_range / 2 * (t.ext_b - t.b) for t in trials)
        idle = records[-1].pop("_idle_j") if records and "_idle_j" in records[-1] else math.nan
        records.append({"stat": out["stat"], "runtime": out["runtime"], "alias": out["alias"],
                        "idle": idle / total, "idle_moved": moved / total,
                        **{k: v for k, v in out.get("parts", {}).items()}})
        return out

    def trial_energies(state, trials):
        result = energies(state, trials)
        records.append({"_idle_j": result[2]})
        return result

    polled.bound_terms, polled._trial_energies = bound_terms, trial_energies


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--seeds", type=int, default=1)
    parser.add_argument("--prompts", type=int, default=6)
    parser.add_argument("--only")
    args = parser.parse_args(argv)
    records: list[dict] = []
    capture(records)
    for scenario in study.SCENARIOS:
        if "polled" not in scenario.meters or (args.only and args.only not in scenario.name):
            continue
        records.clear()
        cells = [study.run_cell(make_energy_meter, scenario, "polled", s, args.prompts) for s in range(args.seeds)]
        rows = [r for c in cells for r in c["rows"]]
        recs = [r for r in records if "stat" in r]
        err = statistics.median(abs(r["gross"]) for r in rows)
        bound = statistics.median(r["bound"] for r in rows)
        keys = sorted({k for r in recs for k in r})
        med = {k: statistics.median(r.get(k, math.nan) for r in recs) for k in keys}
        held = sum(abs(r["gross"]) <= r["bound"] for r in rows) / len(rows)
        print(f"{scenario.name}: err {100 * err:.3f} %, bound {100 * bound:.3f} % ({bound / max(err, 1e-5):.1f}x), "
              f"held {100 * held:.0f} %, readings {len(recs)}")
        print("   " + ", ".join(f"{k} {100 * v:.3f}" if k not in ("dof",) else f"{k} {v:.0f}"
                                for k, v in med.items()), flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
