"""Does the polled bound's split-half difference d hold only the estimate's noise (issue 30.3)? Per study
scenario, on the simulator: the RMS of the signed d = (A − B)/2 against the RMS of the signed errors (≈ 1 where
d is one draw of the estimate's noise; of the trials as the bound sees them: corrected for their aim offsets where
:mod:`harness.energy.aimoffset` applies), and how much of d the trials' measured aim offsets explain — each trial's
phase off the ideal grid × the trials' slope against phase, summed with the halves' signs (``aim_d``) or all
alike (``aim_err``, its share of the estimate's error).

    python scripts/diag_polled_split.py [--seeds 3] [--prompts 10] [--only NAME] [--poll SECONDS]

``--poll`` sets the phase poll (the aim's granularity; 1 ms by default) to tell the aim's share apart.
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
from diag_polled_bound import polled_cells  # noqa: E402
from harness.energy import aimoffset, polledbound  # noqa: E402


def split_terms(trials, powers, phases, mean_p) -> tuple[float, float, float]:
    """(d, aim_d, aim_err), relative: the signed split-half difference and the aim offsets' first-order share of
    it and of the estimate."""
    k = len(powers)
    rel = [p / mean_p - 1 for p in powers]
    ph = [p for p, _ in phases]
    sign = [1 if t.stratum % 2 == 0 else -1 for t in trials]
    ideal = [(ph[i] - trials[i].stratum / k) % 1.0 for i in range(k)]
    u = math.atan2(sum(math.sin(2 * math.pi * x) for x in ideal),
                   sum(math.cos(2 * math.pi * x) for x in ideal)) / (2 * math.pi)
    off = [((x - u + 0.5) % 1.0) - 0.5 for x in ideal]  # of a period
    order = sorted(range(k), key=lambda i: ph[i])
    share = [0.0] * k
    for j, i in enumerate(order):
        a, b = order[j - 1], order[(j + 1) % k]
        share[i] = (rel[b] - rel[a]) / ((ph[b] - ph[a]) % 1.0 or 1.0) * off[i]
    d = sum(s * r for s, r in zip(sign, rel)) / k
    return d, sum(s * x for s, x in zip(sign, share)) / k, sum(share) / k


def capture(records: list[tuple[float, float, float]]) -> None:
    """Wrap the stratified statement: one record per stratified reading."""
    stratified = polledbound._stratified

    def wrapped(state, trials, powers, phases, mean_p, *args, **kwargs):
        if all(t.stratum >= 0 for t in trials) and all(math.isfinite(p) for p, _ in phases):
            aim = aimoffset.correct(trials, powers, phases, args[0]) if args else None  # as the bound sees them
            fixed = aim.powers if aim is not None else powers
            records.append(split_terms(trials, fixed, phases, sum(fixed) / len(fixed)))
        return stratified(state, trials, powers, phases, mean_p, *args, **kwargs)

    polledbound._stratified = wrapped


def rms(values) -> float:
    values = list(values)
    return math.sqrt(sum(v * v for v in values) / len(values)) if values else math.nan


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--seeds", type=int, default=3)
    parser.add_argument("--prompts", type=int, default=10)
    parser.add_argument("--only")
    parser.add_argument("--poll", type=float, help="phase poll, s (the aim's granularity)")
    args = parser.parse_args(argv)
    if args.poll is not None:
        config = study.meter_config
        study.meter_config = lambda *a, **k: {**config(*a, **k), "phase_poll_s": args.poll}
    records: list[tuple[float, float, float]] = []
    capture(records)
    for scenario, cells in polled_cells(args, records):
        errors = [r["gross"] for c in cells for r in c["rows"]]
        if len(records) != len(errors):  # not every reading stratified: d and the error do not pair up
            print(f"{scenario.name}: {len(records)} stratified readings of {len(errors)}, skipped")
            continue
        d, aim_d, aim_e = zip(*records)
        corr = sum(a * b for a, b in zip(d, aim_d)) / math.sqrt(sum(a * a for a in d) * sum(b * b for b in aim_d))
        print(f"{scenario.name}: rms d {100 * rms(d):.5f} %, rms err {100 * rms(errors):.5f} % "
              f"(d ÷ err {rms(d) / rms(errors):.2f}); aim_d {100 * rms(aim_d):.5f} % (corr with d {corr:.2f}), "
              f"d − aim_d ÷ err {rms(x - y for x, y in zip(d, aim_d)) / rms(errors):.2f}; aim_err "
              f"{100 * rms(aim_e):.5f} %, err − aim_err {100 * rms(x - y for x, y in zip(errors, aim_e)):.5f} %; "
              f"mean d {100 * statistics.mean(d):+.5f} %", flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
