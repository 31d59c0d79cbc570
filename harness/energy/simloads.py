"""Power shapes of simulated workloads, as [(seconds, watts), ...] pieces for
:meth:`harness.energy.simulated.SimGPU.run`. Standalone (imports nothing from the harness), like
the simulator, so a study can load it next to an older meter."""
from __future__ import annotations

import random


def llm_like_load(rng: random.Random, seconds: float) -> list[tuple[float, float]]:
    """Bursty power pieces for one simulated generation of about ``seconds``: a prefill burst,
    then decode steps (kernel bursts and short gaps) with occasional host-side stalls."""
    pieces = [(rng.uniform(0.02, 0.06), rng.uniform(350, 450))]
    total = pieces[0][0]
    while total < seconds:
        if rng.random() < 0.02:
            piece = (rng.uniform(0.01, 0.04), rng.uniform(90, 120))
        elif len(pieces) % 2:
            piece = (rng.uniform(0.003, 0.015), rng.uniform(250, 420))
        else:
            piece = (rng.uniform(0.001, 0.006), rng.uniform(90, 160))
        pieces.append(piece)
        total += piece[0]
    return pieces


def square_wave(period_s: float, duty: float, high_w: float, low_w: float, seconds: float) -> list[tuple[float, float]]:
    """A periodic load: ``duty`` of every ``period_s`` at ``high_w``, the rest at ``low_w``."""
    pieces, t = [], 0.0
    while t < seconds - 1e-12:
        high = min(duty * period_s, seconds - t)
        low = min(period_s - duty * period_s, seconds - t - high)
        pieces.append((high, high_w))
        if low > 0:
            pieces.append((low, low_w))
        t += high + max(low, 0.0)
    return pieces


def prefill_then_decode(rng: random.Random, seconds: float, prefill_s: float = 0.12, prefill_w: float = 520.0,
                        step_s: float = 0.02, decode_w: tuple[float, float] = (230.0, 330.0)) -> list[tuple[float, float]]:
    """A generation opening on a prefill plateau (long prompt, high power), then regular decode
    steps: the case where a counter window filling its edges with the window's mean is biased."""
    pieces = [(prefill_s, prefill_w)]
    t = prefill_s
    while t < seconds:
        busy = step_s * rng.uniform(0.7, 0.9)
        pieces += [(busy, rng.uniform(*decode_w)), (step_s - busy, 110.0)]
        t += step_s
    return pieces


def thermal_ramp(pieces: list[tuple[float, float]], rise: float) -> list[tuple[float, float]]:
    """Scale the pieces' power from ×1 at the start to ×(1 + ``rise``) at the end (a GPU heating up)."""
    total = sum(s for s, _ in pieces)
    out, t = [], 0.0
    for s, w in pieces:
        out.append((s, w * (1 + rise * (t + s / 2) / total)))
        t += s
    return out


def stretched(pieces: list[tuple[float, float]], factor: float) -> list[tuple[float, float]]:
    """The same work taking ``factor`` times as long (a slower run: memory stalls, clocks), its
    busy power lower in proportion above ``floor_w`` = the lowest piece's power."""
    floor = min(w for _, w in pieces)
    return [(s * factor, floor + (w - floor) / factor ** 0.5) for s, w in pieces]
