"""The idle right after work, by delay after work, fitted over a cell (issue 30.5: idle steps at a prompt edge).

A counter window's tail is closed on the first refresh caught up with the window's end ``b``; the idle
stretch between ``b`` and that refresh (``s`` long, under one update) is taken at the mean power of the
counter interval after it. A GPU whose clocks stay up for a while after work (P-state hysteresis) draws
more in that stretch than in the interval after it — and where the step ends before the refresh (an
idle that steps down 0.07 s after work on a 100 ms counter), no interval after the tail ever shows it:
the bound, built from how the idle moves between intervals, stated 0.03-0.1 % for errors of 0.2-0.4 %.

The step is a property of the GPU, not of one prompt, and every tail sees the idle after work at another
delay (the counter's phase against ``b`` differs from prompt to prompt; the faster power reading's
short windows fall at yet others). So the meter pools them by **delay after work** δ: each tail adds
its counter intervals after the tail refresh ``[u0, u1]`` (delays after ``b``, lag taken off) with
their mean power, and the power reading's refreshes whose window lies wholly after ``b`` (window
``[t − W, t]``). The excess of the idle after work over its later level is modelled as non-increasing
in δ — a sum of steps down, ``x(δ) = Σ c_i 1[δ < e_i]``, ``c_i ≥ 0``, on a grid of edges ``e_i`` —
and fitted by non-negative least squares (:func:`scipy.optimize.nnls`) to the differences between each
tail's pieces and that tail's latest piece of the same reading (so the idle's level, which wanders from
prompt to prompt, and a reading's scale drop out; each reading's rows weighted by its residual scatter).

A fit is used only where the steps explain the differences significantly (F-test at 99 % against no
step: otherwise the idle after work is not seen to move, and nothing changes). Then, for a stretch of
``s`` taken at the mean of the interval ``[s, s + T]`` (:meth:`AfterWork.stretch`), the error the
profile predicts is ``Δ = ∫₀ˢ x − s · mean_[s, s+T] x`` (the counter path takes it off), known to
± t(0.995, n − p) × its standard error from the fit's covariance on its active steps, plus, in full, how
far Δ moves as each step slides between the piece ends around it (where the data cannot place it: wide
while a cell has seen few tails) — the term the bound carries."""
from __future__ import annotations

import math

import numpy as np

NAN = math.nan
KEEP = 64  # tails remembered per device (a cell's last ones)


def _overlap(u0: np.ndarray, u1: np.ndarray, edges: np.ndarray) -> np.ndarray:
    """Mean over [u0, u1] of 1[δ < e] for every piece (rows) and edge (columns)."""
    lo, hi = u0[:, None], u1[:, None]
    return np.clip(np.minimum(hi, edges[None, :]) - lo, 0.0, None) / (hi - lo)


def _placements(rows: tuple, yw: np.ndarray, weight: np.ndarray, a: np.ndarray, steps: np.ndarray,
                s2: float) -> list[tuple[np.ndarray, np.ndarray]]:
    """For each fitted step: the delays (piece ends: between two the data cannot tell a step's place) where it
    fits the data as well — the other steps kept, its height refitted, the weighted residual sum of squares
    within χ²₁'s 99 % × the residual variance of the fit's — and its height at each."""
    from scipy.stats import chi2

    u0, u1, r0, r1 = rows
    at = np.unique(np.concatenate([[0.0], u0, u1, r0, r1]))
    cols = (_overlap(u0, u1, at) - _overlap(r0, r1, at)) * weight[:, None]
    den = np.maximum(np.sum(cols * cols, axis=0), 1e-12)
    rss = float(np.sum((yw - a @ steps) ** 2))
    out = []
    for j in range(len(steps)):
        rest = yw - a @ steps + a[:, j] * steps[j]  # the data less the other steps
        num = cols.T @ rest
        heights = np.maximum(num / den, 0.0)
        worse = float(rest @ rest) - 2 * heights * num + heights ** 2 * den - rss
        ok = worse <= chi2.ppf(0.99, 1) * s2
        out.append((at[ok], heights[ok]) if ok.any() else (np.array([0.0]), np.array([steps[j]])))
    return out


class AfterWork:
    """Pieces of the idle after work, per device, by delay after the window's end (see the module docstring)."""

    def __init__(self, devices: int):
        self.tails: list[list[list[tuple[float, float, float, str]]]] = [[] for _ in range(devices)]
        self._fits: dict[int, tuple[int, object]] = {}

    def add(self, device: int, pieces: list[tuple[float, float, float, str]]) -> None:
        """One tail's pieces on ``device``: (delay from, delay to, mean W, which reading) — wholly after work."""
        kept = [p for p in pieces if p[1] > p[0] >= 0.0 and math.isfinite(p[2])]
        if len(kept) >= 2:
            self.tails[device].append(kept)
            del self.tails[device][:-KEEP]

    def _rows(self, device: int) -> tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray, np.ndarray, list[str]]:
        """Each tail's pieces less that tail's latest piece of the same reading: (u0, u1, ref u0, ref u1, y, kind)."""
        rows = []
        for pieces in self.tails[device]:
            for kind in {p[3] for p in pieces}:
                mine = [p for p in pieces if p[3] == kind]
                ref = max(mine, key=lambda p: p[0])
                rows += [(p[0], p[1], ref[0], ref[1], p[2] - ref[2], kind) for p in mine if p is not ref]
        cols: list = [list(c) for c in zip(*rows)] if rows else [[] for _ in range(6)]
        return (*(np.asarray(c, dtype=float) for c in cols[:5]), cols[5])

    def fit(self, device: int):
        """(edges, steps, standard-error matrix on the steps, dof) where the steps explain the tails'
        differences significantly; None otherwise (cached until a tail is added)."""
        n_tails = len(self.tails[device])
        cached = self._fits.get(device)
        if cached is not None and cached[0] == n_tails:
            return cached[1]
        result = self._fit(device)
        self._fits[device] = (n_tails, result)
        return result

    def _fit(self, device: int):
        from scipy.optimize import nnls
        from scipy.stats import f

        u0, u1, r0, r1, y, kinds = self._rows(device)
        if len(y) < 4:
            return None
        dt = max(float(np.min(u1 - u0)) / 10, 1e-3)
        edges = dt * np.arange(1, min(int(math.ceil(float(np.max(np.maximum(u1, r1))) / dt)), 200) + 1)
        design = _overlap(u0, u1, edges) - _overlap(r0, r1, edges)
        weight = np.ones(len(y))
        for _ in range(2):  # each reading's rows weighted by the scatter the steps leave (or, first, its own)
            steps, _ = nnls(design * weight[:, None], y * weight)
            resid = y - design @ steps
            for kind in set(kinds):
                mask = np.array([k == kind for k in kinds])
                scatter = math.sqrt(float(np.mean(resid[mask] ** 2))) if mask.sum() >= 3 else NAN
                weight[mask] = 1.0 / max(scatter, 1e-6) if math.isfinite(scatter) else 0.0
        active = np.flatnonzero(steps > 0)
        n, p = int(np.count_nonzero(weight)), len(active)
        if p == 0 or n - p < 3:
            return None
        rss0, rss1 = float(np.sum((y * weight) ** 2)), float(np.sum((resid * weight) ** 2))
        if rss1 <= 0 or (rss0 - rss1) / p / (rss1 / (n - p)) < f.ppf(0.99, p, n - p):
            return None  # the idle after work is not seen to move with the delay
        a = design[:, active] * weight[:, None]
        cov = rss1 / (n - p) * np.linalg.pinv(a.T @ a)
        places = _placements((u0, u1, r0, r1), y * weight, weight, a, steps[active], rss1 / (n - p))
        return edges[active], steps[active], cov, n - p, places

    def stretch(self, device: int, seconds: float, t0: float, t1: float) -> tuple[float, float]:
        """For an idle stretch [0, ``seconds``] after work taken at the mean power over [``t0``, ``t1``] (delays):
        the error the fitted profile predicts (J, the stretch's energy less what it was taken as) and its
        99 % half-width (J). (0, 0) where no step was seen."""
        fitted = self.fit(device)
        if fitted is None or seconds <= 0 or t1 <= t0:
            return 0.0, 0.0
        from scipy.stats import t

        edges, steps, cov, dof, places = fitted

        def gain(at: np.ndarray) -> np.ndarray:
            return np.minimum(seconds, at) - seconds * _overlap(np.array([t0]), np.array([t1]), at)[0]

        g = gain(edges)
        spread = 0.0  # each step anywhere the data place it as well (its height refitted there)
        for here, (at, heights) in zip(g * steps, places):
            kinks = np.array([x for x in (seconds, t0, t1) if at.min() <= x <= at.max()])
            spread += max(float(np.max(np.abs(heights * gain(at) - here))),
                          float(np.max(np.abs(heights.max() * gain(kinks) - here), initial=0.0)))
        quantile = float(t.ppf(0.995, dof))  # Student's 99 % (idle.quantile; not imported: idle holds a profile)
        return float(g @ steps), quantile * math.sqrt(max(float(g @ cov @ g), 0.0)) + spread


def note_tail(state, seen: list, k: int | None, b: float, device: int, coarse: bool) -> None:
    """Add one counter tail to the profile: the counter's intervals from its tail refresh ``seen[k]`` on, and
    the faster power reading's refreshes whose window lies wholly after ``b`` (their delays after ``b``)."""
    from harness.energy.idlesteps import counter_rates

    if k is None or len(seen) < k + 2 or coarse:
        return

    lag = state.device_sensor(state.primary, device).lag_estimate()
    lag = lag if math.isfinite(lag) and lag > 0 else 0.0
    after = seen[k:]
    pieces = [(one.t - b - lag, two.t - b - lag, w, "counter")
              for one, two, w in zip(after, after[1:], counter_rates(state, state.primary, after))]
    window = state.power_window(state.cross) if state.cross is not None else None
    if window and after:
        pieces += [(t - window - b, t - b, w, "power") for t, w in _power_refreshes(state, device, b, after[-1].t)
                   if t - window >= b]
    state.idle.profile.add(device, pieces)
    if state.idle.profile.fit(device) is not None:  # a step after work: the tails' lag tests cannot tell it from lag
        state.device_sensor(state.primary, device).blind_tails()


def _power_refreshes(state, device: int, since: float, until: float) -> list[tuple[float, float]]:
    """(refresh time, value) of the power reading on ``device`` over [since, until]: where a polled value
    changed, placed on the fitted refresh grid where that is known (else half a poll before it was seen)."""
    channel = state.cross
    series = state.sampler.snapshot(channel.name)[device]
    grid = state.sensors[channel.name].grid()
    on_grid = grid.points >= 4 and math.isfinite(grid.t_ref) and math.isfinite(grid.period)
    out = []
    for (t0, v0), (t1, v1) in zip(zip(series.times, series.values), zip(series.times[1:], series.values[1:])):
        if t1 < since or t0 > until or v1 == v0 or not math.isfinite(v1):
            continue
        poll = state.cfg.interval_s
        t = t1 - poll / 2
        if on_grid:
            point = grid.t_ref + math.floor((t1 - grid.t_ref) / grid.period) * grid.period
            t = point if point > max(t0, t1 - poll) - 1e-3 else t
        out.append((t, v1))
    return out


def tail(state, device: int, seconds: float, idle_w: float, sig: float, own: float) -> tuple[float, float]:
    """The tail's idle stretch of ``seconds`` after work on ``device``: the error the profile predicts (J, to
    take off) and the stretch's 99 % bound (J). Where the profile sees the idle stepping after work, the step is
    modelled (:func:`correct`: the prediction's uncertainty, where the step may lie, the lag bracket, what no
    tail has seen), so the stretch moves beyond it only as the idle does at rest; elsewhere as it moves right
    after work (:meth:`~harness.energy.idle.IdleTracker.stretch_bound`)."""
    delta, known = correct(state, device, seconds, idle_w)
    rest = state.idle.profile.fit(device) is not None
    sig = _rest_sigma(state, device, sig, own) if rest else sig
    return delta, state.idle.stretch_bound(device, seconds, sig, own, rest=rest) + known


def _rest_sigma(state, device: int, sig: float, own: float) -> float:
    """The edge's σ as the idle moves at rest (or the reading's own noise, where larger); ``sig`` where the
    idle at rest is not measured yet."""
    still = state.idle.still_sigma(device)
    if not math.isfinite(still):
        return sig
    return max(still, own) if math.isfinite(own) else still


def correct(state, device: int, seconds: float, idle_w: float = NAN) -> tuple[float, float]:
    """The tail stretch's error the profile predicts on ``device`` (J) and its 99 % half-width: a stretch of
    ``seconds`` after work taken at the counter interval after the tail refresh (one update long), idle at
    ``idle_w``. Where the counter's lag is known only to a bracket, the stretch's end may lie that much either
    way on the profile (a step right there): the prediction's change over that, in full, is added; so is
    what the cell's tails have not yet seen (:func:`unseen`)."""
    period = state.update_period(state.primary, device)
    period = period if math.isfinite(period) else 0.1
    sensor = state.device_sensor(state.primary, device)
    half = (sensor.lag_hi - sensor.lag_lo) / 2 if math.isfinite(sensor.lag_hi) else 0.0
    profile = state.idle.profile
    delta, known = profile.stretch(device, seconds, seconds, seconds + period)
    known += unseen(state, device, seconds, idle_w, period)
    if delta == 0.0 or half <= 0:
        return delta, known
    moved = max(abs(profile.stretch(device, s, s, s + period)[0] - delta)
                for s in (max(seconds - half, 0.0), seconds + half))
    return delta, known + moved


def unseen(state, device: int, seconds: float, idle_w: float, period: float) -> float:
    """Where the idle after work was seen stepping down (:meth:`~harness.energy.sensors.Sensor.blind_tails`),
    a step that ends before the shortest delay after work at which any of the cell's tails saw the idle shows
    in no piece (the fit cannot place it: early in a cell, before a tail's pieces began close to the work's
    end). The part of the stretch below that delay is priced, in full, at up to the work's mean power over
    ``idle_w`` (J) — until a piece began within the fast power reading's window (a tenth of a counter update
    where there is none) of the work's end; a step shorter than that is not covered."""
    sensor = state.device_sensor(state.primary, device)
    if not sensor.tails_blind or state.coarse() or not math.isfinite(idle_w) or seconds <= 0:
        return 0.0
    lag = sensor.lag_estimate()
    later = lag - sensor.lag_lo if math.isfinite(lag) else 0.0  # a counter delay (and the stretch) may be this longer
    nearest = min((p[0] + (later if p[3] == "counter" else 0.0) for pieces in state.idle.profile.tails[device]
                   for p in pieces), default=math.inf)
    window = state.power_window(state.cross) if state.cross is not None else None
    if nearest <= (window if window else period / 10):
        return 0.0
    mean_w = state.mean_power_w / state.devices if math.isfinite(state.mean_power_w) else 2 * idle_w
    return max(mean_w - idle_w, 0.0) * min(seconds + later, nearest)


def _height(fitted, beyond: float) -> float:
    """How far (W, 99 %) the fitted profile may lie above its later level at delays ≥ ``beyond``: each step
    that may end later (anywhere the data place it as well), at the largest height it takes there, plus
    Student's 99 % × the steps' summed standard error."""
    from scipy.stats import t

    edges, steps, cov, dof, places = fitted
    top = sum(max(float(c), float(np.max(h))) for e, c, (at, h) in zip(edges, steps, places)
              if max(float(e), float(np.max(at))) > beyond)
    ones = np.ones(len(steps))
    return top + float(t.ppf(0.995, dof)) * math.sqrt(max(float(ones @ cov @ ones), 0.0))


def lead(state, device: int, trial, refresh: float, shift: float, rate: float, sig: float, own: float) -> float:
    """99 % bound (J) on the lead's idle stretch [``refresh`` − ``shift``, a] on ``device`` (``refresh``: the lead
    refresh's time, ``shift``: the lag taken) taken at ``rate`` (W). Today's
    (:meth:`~harness.energy.idle.IdleTracker.stretch_bound`, the idle moving as right after work), or — where
    the profile sees the idle stepping after work, less where that is smaller — the stretch as the profile
    bounds it: after the synchronise the GPU is idle, so the stretch draws the idle at rest (the post-work
    curve at a, ± twice its roughness; before five points, ± their range) plus at most what the fitted steps
    still add at the stretch's shortest delay after work (it began that long after the synchronise at least,
    the lag taken at its bracket's top): its mean lies in that band, ``rate`` somewhere against it, and it
    moves within it as the idle does at rest (``stretch_bound(rest=True)``) — over the stretch as long as the
    lag's bracket lets it be. Today's where the lag is not bracketed or the stretch may begin before the
    synchronise."""
    seconds = trial.a - refresh + shift
    today = state.idle.stretch_bound(device, seconds, sig, own)
    fitted = state.idle.profile.fit(device)
    idle = state.idle
    rough = idle.post.roughness(trial.a, trial.a) / idle.devices
    if not math.isfinite(rough) and len(idle.post) >= 2:  # before five: the range of the post-work idle so far
        rough = max(max(sum(w) for w in idle.post.watts) - min(sum(w) for w in idle.post.watts), 0.0) / idle.devices
    sensor = state.device_sensor(state.primary, device)
    beyond = refresh - sensor.lag_hi - trial.watched_from  # ≥ 0: the stretch began after the synchronise
    if fitted is None or seconds <= 0 or not math.isfinite(rough + rate + beyond) or beyond < 0:
        return today
    rest_w = idle.post.at(trial.a)[device]
    band = max(rate - rest_w, rest_w + _height(fitted, beyond) - rate, 0.0) + 2 * rough
    sig_rest = _rest_sigma(state, device, sig, own)
    longest = seconds + max(sensor.lag_hi - shift, 0.0)  # as long as the lag's bracket lets the stretch be
    return min(today, longest * band + idle.stretch_bound(device, longest, sig_rest, own, rest=True))
