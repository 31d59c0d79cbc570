"""Sensor properties measured on a known load, for ``harness-gpu-check`` (issue 23 item 11): how
often each source refreshes (and how irregularly), the counter's resolution and lag, the power
reading's averaging window, and how long the GPU stays above its idle floor after work.

``busy(seconds)`` runs a constant load on the device for ``seconds`` and returns when it is done (a
matrix-multiply loop on a GPU; a :class:`~harness.energy.simulated.SimGPU` plateau in tests). A
:class:`FastLog` polls the sources every millisecond meanwhile (the clock's ``periodic``: a real
thread, or virtual time), so each refresh is located to ± half a millisecond. Then, over
``steps`` load steps opened at random phases of the sensors' refreshes:

* **counter lag**: the counter interval straddling each edge of the step holds idle power up to
  the moment the counter saw the edge and busy power after (or the reverse); with the idle and
  busy powers from the intervals wholly on either side, that moment minus the true edge is the lag;
* **averaging window and lag** of a power reading: :func:`fit_window` over all the steps (the
  estimator the start-up self-check uses on its one step, :mod:`.selfcheck`); the steps' lengths
  vary so that their falling edges meet the refreshes at other delays than their rising ones;
* **post-load idle**: after a longer load, power in 0.25 s bins until it stays within 2 % of its
  final level: the settle time (``energy.idle_settle_s`` should exceed it) and the excess right
  after work.

Every figure says how it was obtained: ``measured``, ``inferred`` (e.g. an upper bound, or a
documented value) or ``not measured`` (and why).
"""
from __future__ import annotations

import math
import random
import statistics
import threading
from dataclasses import asdict, dataclass

import numpy as np

from harness.energy.sensors import characterize

NAN = math.nan


@dataclass
class Figure:
    value: float | None
    unit: str
    status: str  # measured | inferred | not measured
    how: str

    def as_dict(self) -> dict:
        return asdict(self)


def _missing(unit: str, why: str) -> Figure:
    return Figure(None, unit, "not measured", why)


class FastLog:
    """Every channel polled each ``poll_s`` through ``clock.periodic``; value changes logged as
    (time ± half-width, values) per channel."""

    def __init__(self, channels, clock, poll_s: float = 0.001):
        self.channels, self.clock = list(channels), clock
        self.changes: dict[str, list[tuple[float, float, list[float]]]] = {c.name: [] for c in channels}
        self.last: dict[str, tuple[float, list[float]]] = {}
        self.lock = threading.Lock()
        self.timer = clock.periodic(poll_s, self.poll)

    def poll(self) -> None:
        for channel in self.channels:
            try:
                values = channel.read()
            except Exception:  # noqa: BLE001 — a glitch: this poll is skipped
                continue
            now = self.clock.now()
            with self.lock:
                before = self.last.get(channel.name)
                if before is not None and values != before[1]:
                    self.changes[channel.name].append(((before[0] + now) / 2, (now - before[0]) / 2, list(values)))
                self.last[channel.name] = (now, values)

    def stop(self) -> None:
        self.timer.stop()

    def series(self, name: str) -> list[tuple[float, float]]:
        """(refresh time, device-0 value) of channel ``name``."""
        with self.lock:
            return [(t, v[0]) for t, _, v in self.changes[name]]


def _rates(points: list[tuple[float, float]]) -> list[tuple[float, float, float]]:
    return [(a[0], b[0], (b[1] - a[1]) / (b[0] - a[0])) for a, b in zip(points, points[1:]) if b[0] > a[0]]


def levels(rates: list[tuple[float, float, float]], edges: list[tuple[float, bool]], margin: float = 0.12):
    """Median power of the intervals wholly idle and wholly busy (``margin`` away from every edge)."""
    busy_spans = [(t0, t1) for (t0, r0), (t1, r1) in zip(edges, edges[1:]) if r0 and not r1]
    near = lambda a, b: any(a - margin < t < b + margin for t, _ in edges)  # noqa: E731
    busy = [r for a, b, r in rates if not near(a, b) and any(s0 < a and b < s1 for s0, s1 in busy_spans)]
    idle = [r for a, b, r in rates if not near(a, b) and not any(s0 < b and a < s1 for s0, s1 in busy_spans)]
    return (statistics.median(idle) if idle else NAN), (statistics.median(busy) if busy else NAN)


def counter_lag(points: list[tuple[float, float]], edges: list[tuple[float, bool]]) -> list[float]:
    """Lag estimates (s) from counter refreshes around known load edges ((time, rising)): in the
    interval whose power lies between the idle and busy levels, the moment the counter moved."""
    rates = _rates(points)
    idle, busy = levels(rates, edges)
    if not math.isfinite(idle) or not math.isfinite(busy) or busy - idle < 1.0:
        return []
    out = []
    for edge, rising in edges:
        p0, p1 = (idle, busy) if rising else (busy, idle)
        for a, b, rate in rates:
            if b <= edge or a > edge + 0.3:
                continue
            frac = (rate - p0) / (p1 - p0)  # the share of the interval already at the new level
            if 0.02 < frac < 0.98:
                out.append(b - frac * (b - a) - edge)
                break
            if frac >= 0.98:
                break
    return out


LAG_MAX_S = 0.2
EARLY_S = 0.15  # each load's first part (a generation's prefill) is fitted at its own level
HOLD_S = 1.6    # the level after work (P-state hysteresis) is fitted over at most this after each load
WINDOWS = np.unique(np.round(np.geomspace(0.002, 1.35, 160), 4))
# on to 3 s, 4 % apart: where a reading had not fallen back by then (1.5 s read as 25 ms, issue 30.1; :mod:`.selfcheck`)
LONG_WINDOWS = np.unique(np.concatenate([WINDOWS, np.round(np.geomspace(1.35, 3.0, 21)[1:], 4)]))
CHI2_95 = 5.99  # χ²(2) 95 % for (lag, window) jointly: a constant load's residuals (the sensor's noise) are independent
THRESHOLD = 4 * CHI2_95  # ×4 on a bursty load (a generation's): its residuals are not independent
NARROW = 1.5      # a bracket hi ÷ lo at most this is a value; wider only says where the window is not


@dataclass
class Fit:
    """A power reading's window and lag fitted to load edges (best, and the 95 % bracket), the load's
    height above idle and the residual noise (W), the refreshes used."""

    window_s: float
    window_between_s: tuple[float, float]
    lag_s: float
    lag_between_s: tuple[float, float]
    step_w: float
    noise_w: float
    points: int

    def narrow(self) -> bool:
        lo, hi = self.window_between_s
        return hi <= NARROW * max(lo, 1e-3)


def _overlap(lo: np.ndarray, hi: np.ndarray, spans: list[tuple[float, float]]) -> np.ndarray:
    """|[lo, hi] ∩ spans| (sorted, disjoint, finite spans) elementwise: the spans' cumulative length at hi
    minus that at lo (piecewise linear: one interpolation however many spans)."""
    xs = np.array([x for span in spans for x in span])
    cum = np.concatenate([[0.0], np.cumsum([x for a, b in spans for x in (b - a, 0.0)])])[:-1]
    return np.interp(hi, xs, cum) - np.interp(lo, xs, cum)


def fit_window(points: list[tuple[float, float]], loads: list[tuple[float, float]],
               lag_step_s: float = 0.002, threshold: float = THRESHOLD, windows: np.ndarray = WINDOWS) -> Fit | None:
    """The averaging window and lag of a power reading from its refreshes ``points`` ((time, watts))
    around known loads ``loads`` ([a, b] spans, idle between): the one estimator of both, for
    ``harness-gpu-check`` (many steps of a constant load) and the start-up self-check (one step of
    the prompt's own workload, :mod:`.selfcheck`). A reading averaging the last W s published
    ``lag`` late reads, at a refresh t, ``I + X_early·|win ∩ early| / W + X·|win ∩ rest| / W +
    H·|win ∩ after| / W`` with win = [t − lag − W, t − lag], "early" each load's first ``EARLY_S``
    (a generation opens on a prefill burst), "after" up to ``HOLD_S`` after each load (P-state
    hysteresis). Least squares over a grid of lag (0..0.2 s) × W (``windows``: 2 ms..1.35 s), the levels exact at
    each point; the 95 % bracket is the profile-likelihood region (``threshold``: χ²₂, ×4 for a
    bursty load's dependent residuals), widened by one grid step. Window and lag are told apart only by
    readings part-way through edges at different delays (one such delay fits any W ∝ delay − lag:
    the bracket then says so). None with fewer than six refreshes."""
    if len(points) < 6 or not loads:
        return None
    loads = sorted(loads)
    t = np.array([p[0] for p in points])
    y = np.array([p[1] for p in points])
    early = [(a, a + min(EARLY_S, (b - a) / 4)) for a, b in loads]
    rest = [(e, b) for (_, e), (_, b) in zip(early, loads)]
    after = [(b, min(b + HOLD_S, nxt)) for (_, b), nxt in zip(loads, [a for a, _ in loads[1:]] + [math.inf])]
    lags = np.arange(0.0, LAG_MAX_S + 1e-9, lag_step_s)
    sse = np.empty((len(lags), len(windows)))
    coefs = np.empty((len(lags), len(windows), 4))
    for i, lag in enumerate(lags):  # one lag at a time: (window, point, 4) stays small for long logs
        end = (t - lag)[None, :]
        start = end - windows[:, None]
        cols = np.stack([np.ones_like(start)] + [_overlap(start, end, s) / windows[:, None]
                                                  for s in (early, rest, after)], axis=-1)
        gram = np.einsum("wpi,wpj->wij", cols, cols) + 1e-9 * np.eye(4)
        coefs[i] = np.linalg.solve(gram, np.einsum("wpi,p->wi", cols, y)[..., None])[..., 0]
        sse[i] = np.sum((np.einsum("wpi,wi->wp", cols, coefs[i]) - y) ** 2, axis=-1)
    best = np.unravel_index(int(np.argmin(sse)), sse.shape)
    sigma2 = max(float(sse[best]) / max(len(points) - 6, 1), 1e-6)
    li, wi = np.nonzero(sse <= sse[best] + threshold * sigma2)  # the bracket, widened by one grid step
    w_lo, w_hi = windows[max(wi.min() - 1, 0)], windows[min(wi.max() + 1, len(windows) - 1)]
    l_lo, l_hi = max(lags[li.min()] - lag_step_s, 0.0), lags[li.max()] + lag_step_s
    return Fit(float(windows[best[1]]), (float(w_lo), float(w_hi)), float(lags[best[0]]), (float(l_lo), float(l_hi)),
               float(coefs[best][2]), math.sqrt(sigma2), len(points))


def post_load_idle(points: list[tuple[float, float]], kind: str, work_end: float, bin_s: float = 0.25) -> dict:
    """Settle time after a load, and the excess above the final idle right after it."""
    if kind == "energy":
        rates = [((a + b) / 2, r) for a, b, r in _rates([p for p in points if p[0] >= work_end])]
    else:
        rates = [(t, v) for t, v in points if t >= work_end]
    if len(rates) < 4:
        return {}
    end = rates[-1][0]
    bins: dict[int, list[float]] = {}
    for t, r in rates:
        bins.setdefault(int((t - work_end) / bin_s), []).append(r)
    levels = sorted((k * bin_s + bin_s / 2, statistics.mean(v)) for k, v in bins.items())
    final = statistics.mean(r for t, r in rates if t >= end - 2.0)
    tol = max(0.02 * final, 1.0)
    settle = next((t for i, (t, _) in enumerate(levels) if all(abs(v - final) <= tol for _, v in levels[i:])), NAN)
    return {"settle_s": settle, "final_w": final, "excess_w": levels[0][1] - final}


def run_steps(channels, busy, clock, steps: int = 12, on_s: float = 0.4, rng: random.Random | None = None):
    """``steps`` load steps of ``on_s`` to ``on_s`` + 0.1 s (a falling edge at another phase of the
    refreshes than its rising one: window and lag told apart) opened at random phases, then a 3 s
    load; the log and the edges."""
    rng = rng or random.Random(0)
    log = FastLog(channels, clock)
    edges = []
    clock.sleep(0.5)
    for _ in range(steps):
        clock.sleep(rng.uniform(0.4, 0.7))
        t0 = clock.now()
        busy(on_s + rng.uniform(0.0, 0.1))
        edges += [(t0, True), (clock.now(), False)]
    clock.sleep(2.5)  # a long idle before the long load: its rising edge suits a long averaging window too
    t0 = clock.now()
    busy(3.0)
    work_end = clock.now()
    return log, edges + [(t0, True), (work_end, False)], work_end


def characterize_sources(sources, busy, clock, quick: bool = False, extra=()) -> dict[str, Figure]:
    """Every figure of the module docstring for one device (``sources`` opened on it; ``extra``:
    further channels on it, e.g. ``nvmlDeviceGetPowerUsage`` = ``power.draw`` beside the instant field)."""
    channels = sources.channels() + list(extra)
    sensors = characterize(channels, clock, 1.0 if quick else 2.0)
    log, edges, work_end = run_steps(channels, busy, clock, steps=10 if quick else 16)
    clock.sleep(5.0 if quick else 12.0)
    log.stop()
    figures: dict[str, Figure] = {}
    for c in channels:
        s, name = sensors[c.name], c.name
        period = s.inferred_update_s
        figures[f"{name} update period"] = Figure(period, "s", "measured", "median time between value changes, "
                                                  "1 ms polling at idle") if math.isfinite(period) else \
            _missing("s", "fewer than three changes while polled")
        figures[f"{name} refresh jitter"] = Figure(s.jitter(), "s", "measured", "RMS of refresh times about the "
                                                   "fitted grid") if s.grid().points >= 4 else \
            _missing("s", "too few refreshes to fit a grid")
        figures.update(_channel_figures(c, s, log.series(c.name), edges, work_end))
    return figures


def _channel_figures(channel, sensor, points, edges, work_end) -> dict[str, Figure]:
    name, out = channel.name, {}
    idle = post_load_idle(points, channel.kind, work_end)
    if idle and not math.isfinite(idle["settle_s"]):
        out[f"{name} post-load idle settle time"] = _missing("s", "never within 2 % of its final level (too coarse "
                                                                  "or still drifting)")
    elif idle:
        out[f"{name} post-load idle settle time"] = Figure(idle["settle_s"], "s", "measured",
                                                           f"power within 2 % of its final {idle['final_w']:.1f} W "
                                                           f"after a 3 s load; {idle['excess_w']:+.1f} W at first")
    if channel.kind == "energy":
        q, note = sensor.resolution_j, sensor.resolution_note
        out[f"{name} resolution"] = Figure(q, "J", "inferred" if note.startswith("≤") else "measured", note)
        lags = counter_lag(points, edges)
        out[f"{name} lag"] = Figure(statistics.median(lags), "s", "measured", f"median of {len(lags)} load edges") \
            if len(lags) >= 3 else _missing("s", f"only {len(lags)} usable load edges")
        return out
    loads = [(a, b) for (a, rising), (b, _) in zip(edges, edges[1:]) if rising]
    fit = fit_window([(t, v) for t, v in points if t <= work_end + HOLD_S], loads, threshold=CHI2_95)
    documented = channel.semantics.window_s if channel.semantics is not None else None
    if fit is not None and fit.narrow() and fit.step_w > max(3 * fit.noise_w, 5.0):
        (lo, hi), (l_lo, l_hi) = fit.window_between_s, fit.lag_between_s
        how = f"fit to the readings around {len(loads)} load steps (fit_window, as the start-up self-check)"
        out[f"{name} averaging window"] = Figure(fit.window_s, "s", "measured",
                                                 f"{how}: 95 % {lo * 1e3:.0f}..{hi * 1e3:.0f} ms")
        out[f"{name} lag"] = Figure(fit.lag_s, "s", "measured", f"{how}: 95 % {l_lo * 1e3:.0f}..{l_hi * 1e3:.0f} ms")
    elif documented is not None:
        why = "" if fit is None else f"; the load steps bracket it only: {fit.window_between_s[0] * 1e3:.0f}.." \
                                     f"{fit.window_between_s[1] * 1e3:.0f} ms"
        out[f"{name} averaging window"] = Figure(documented, "s", "inferred", channel.semantics.note + why)
    else:
        out[f"{name} averaging window"] = _missing("s", "the load steps did not narrow it, none documented")
    return out


def sensor_profile(figures: dict[str, Figure], names: list[str]) -> dict[str, dict]:
    """Per reading (channel name): its update period, averaging window and lag as
    :func:`harness.energy.profiles.profile_from_figures` takes them (only figures measured here)."""
    keys = {"update_s": "update period", "window_s": "averaging window", "lag_s": "lag"}
    out = {}
    for name in names:
        out[name] = {}
        for key, label in keys.items():
            figure = figures.get(f"{name} {label}")
            if figure is not None and figure.status == "measured":
                out[name][key] = {"value": figure.value, "how": figure.how}
    return out
