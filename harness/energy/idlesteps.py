"""How much the idle power moves between adjacent sensor intervals, measured (issue 30).

A window's edge is closed on a sensor refresh next to an idle stretch whose energy is taken at the
power of the adjacent interval (the counter's, or the post-work readings'). How far the stretch's
power can differ from that interval's is a property of this GPU's idle (ripple, fans, P-state
steps) and of the sensor, not a fixed 2 %: it is measured as the differences between the mean
powers of adjacent idle intervals —

* over the idle baseline at start-up (:func:`from_baseline`), watched every millisecond: every pair
  of adjacent intervals (a counter: refresh to refresh, spaced on the fitted refresh grid where it
  agrees; a power reading: readings one averaging window apart, so they share no averaging);
* after each counter window whose tail saw three refreshes (:func:`from_refreshes`): the post-work
  idle right where the edges lie, kept apart: P-state steps fall there (the larger movement is used).

Where the post-work idle is read for net energy, at one delay after work through a cell, and whether
counter intervals draw the same: :func:`post_index`, :func:`flat`.

:meth:`harness.energy.idle.IdleTracker.step_sigma` is their RMS: the standard deviation of an edge
stretch's power around the adjacent interval's (each rate's own quantisation and timing noise are
in it, twice).
"""
from __future__ import annotations

import math

from harness.energy.phases import Refresh

NAN = math.nan
POST_FLAT = 4  # counter intervals that must draw the same for the post-work idle to count as stopped (post_index)


def rate(state, first: Refresh, second: Refresh, device: int = 0) -> tuple[float, float]:
    """Mean power between two refreshes of one device, and how far an idle stretch next to that
    interval may draw otherwise (W, one standard deviation): the idle's measured movement between
    adjacent intervals (:mod:`.idlesteps`), or this rate's own noise where larger (the refreshes'
    timing, uniform ± the half-widths; the counter's steps, two truncations: q/√6)."""
    spacing = state.spacing(state.primary, first, second)
    if spacing <= 0:
        return NAN, NAN
    watts = (second.value - first.value) / spacing
    if watts < 0 or watts > 5 * (state.power_limit_w() if math.isfinite(state.power_limit_w()) else 2000.0):
        return NAN, NAN  # a counter that went backwards (reset, wrap) or jumped
    own = own_noise(state, first, second, watts)
    step = state.idle.step_sigma(device)
    return watts, max(step, own) if math.isfinite(step) else own + 0.02 * abs(watts)  # 2 %: assumed, never measured


def own_noise(state, first: Refresh, second: Refresh, watts: float) -> float:
    """One standard deviation (W) of a rate's own noise: its refreshes' timing (uniform ± the
    half-widths, unless spaced on the grid) and the counter's steps (two truncations: q/√6)."""
    spacing = state.spacing(state.primary, first, second)
    q = state.sensors[state.primary.name].resolution_j
    timing = (first.halfwidth + second.halfwidth) / spacing if spacing != second.t - first.t else 0.0
    return math.hypot(abs(watts) * timing / math.sqrt(3), (q if math.isfinite(q) else 1e-3) / spacing / math.sqrt(6))


def counter_rates(state, channel, refreshes: list[Refresh]) -> list[float]:
    """Mean power (W) between successive refreshes of one device's counter, spaced on the fitted
    refresh grid where it agrees (NaN for a pair that went backwards)."""
    out = []
    for first, second in zip(refreshes, refreshes[1:]):
        spacing = state.spacing(channel, first, second)
        out.append((second.value - first.value) / spacing if spacing > 0 and second.value >= first.value else NAN)
    return out


def from_refreshes(state, channel, device: int, refreshes: list[Refresh], after: bool = False) -> None:
    """Differences of adjacent counter intervals' powers among ``refreshes`` (all in idle; ``after``: right
    after work)."""
    rates = counter_rates(state, channel, refreshes)
    state.idle.add_steps(device, [b - a for a, b in zip(rates, rates[1:])], after=after)


def from_baseline(state, channel, seen: list[list[Refresh]], a: float, b: float) -> None:
    """Seed the idle's interval-to-interval movement from the refreshes a 1 ms watcher saw over the
    start-up idle [a, b] (per device); where a power reading refreshes faster than ``channel``, its
    successive readings there too, one update (or window) apart (how a stretch shorter than ``channel``'s
    interval moves: :meth:`~harness.energy.idle.IdleTracker.stretch_bound`)."""
    _pool(state, channel, seen)
    fast = state.cross if state.cross is not None and state.cross is not channel else None
    if fast is not None and state.update_period(fast) < 0.67 * state.update_period(channel):
        scale = max(state.update_period(fast), state.power_window(fast) or 0.0)
        for d, s in enumerate(state.sampler.snapshot(fast.name)):  # successive readings one scale apart
            readings, last = [], -math.inf
            for t, v in zip(s.times, s.values):
                if a <= t <= b and t >= last + scale - 1e-9:
                    readings.append(v)
                    last = t
            state.idle.add_fine(d, readings, scale)


def _pool(state, channel, seen: list[list[Refresh]]) -> None:
    window = state.power_window(channel) or 0.0
    period = state.update_period(channel)
    apart = max(window, period if math.isfinite(period) else 0.0) - 1e-9
    for d, refreshes in enumerate(seen):
        if channel.kind == "energy":
            from_refreshes(state, channel, d, refreshes)
            continue
        diffs, j = [], 0
        for r in refreshes:  # readings one averaging window (≥ one update) apart: no shared averaging
            while j < len(refreshes) and refreshes[j].t < r.t + apart:
                j += 1
            if j < len(refreshes):
                diffs.append(refreshes[j].value - r.value)
        state.idle.add_steps(d, diffs)


def post_index(state, seen: list[Refresh], k: int, device: int, b: float, last: bool, full: bool) -> int | None:
    """Where the post-work idle is read (issue 30.5): at one delay after work through a cell, so that the
    offsets to the settled idle, measured once, hold for every prompt. An idle still stepping down after
    work (P-state) read wherever the counter's phase happens to put the interval scatters the net energy
    by the step (issue 30's 0.12 s step: net 3-5 % mean).

    The tails where the settled idle is due (``full``: the meter waits idle_settle_s then anyway) look for
    the first counter interval from refresh ``k`` on from which the idle has stopped moving — it and the
    next ``POST_FLAT`` − 1 draw the same (:func:`flat`); where it moved before that, that interval's delay
    after ``b`` becomes ``IdleTracker.post_delay`` (the longest so far). Any tail whose first two intervals
    differ raises it past them. Every tail reads the first clean interval that starts that long after
    work or later; where the idle was never seen moving, right after work (refresh ``k``), as the edges
    are. An interval a failed read widened is passed over (its rate says nothing of the idle). None: not
    yet seen (``last``: the wait is over, take the last there is)."""
    if len(seen) < k + 3:
        return None
    still = state.idle.still_sigma(device)
    if full:
        found = next((j for j in range(k, len(seen) - POST_FLAT) if flat(state, seen[j:j + POST_FLAT + 1], still)),
                     None)
        if found is None and not last:
            return None
        stop = found if found is not None else max(len(seen) - 2, k)
        if not flat(state, seen[k:stop + 2], still, clean=False):
            _later(state, device, seen[stop].t - b)
    elif not flat(state, seen[k:k + 3], still, clean=False):  # moving right after work: not done by then
        _later(state, device, seen[k + 2].t - b)
    delay = state.idle.post_delay[device]
    start = k if not math.isfinite(delay) else \
        next((j for j in range(k, len(seen)) if seen[j].t - b >= delay - seen[j].halfwidth), len(seen))
    chosen = next((j for j in range(start, len(seen) - 1) if flat(state, seen[j:j + 2], still)), None)
    return chosen if chosen is not None or not last else max(len(seen) - 2, k)


def read_post(state, seen: list[list[Refresh]], chosen: list[int | None], post: list[int | None],
              rates: list[float]) -> None:
    """Note the post-work idle of every device over the interval :func:`post_index` chose (``post``, else the
    tail's, ``chosen``), and — where that is later — what it drew right after work (``rates``, over the
    tail's interval) as the edges' idle (:meth:`~harness.energy.idle.IdleTracker.add_edge`)."""
    at = [p if p is not None else c for p, c in zip(post, chosen)]
    pairs = [(s[j], s[j + 1]) for j, s in zip(at, seen) if j is not None and len(s) > j + 1]
    if len(pairs) < len(seen):
        return
    times = [(one.t + two.t) / 2 for one, two in pairs]
    state.idle.add_post(sum(times) / len(times), [rate(state, *p, d)[0] for d, p in enumerate(pairs)])
    edge_t = [(s[c].t + s[c + 1].t) / 2 for c, s in zip(chosen, seen) if c is not None and len(s) > c + 1]
    if len(edge_t) == len(seen) and all(math.isfinite(r) for r in rates):
        state.idle.add_edge(sum(edge_t) / len(edge_t), rates)


def _later(state, device: int, seconds: float) -> None:
    delay = state.idle.post_delay[device]
    state.idle.post_delay[device] = max(seconds, delay if math.isfinite(delay) else 0.0)


def flat(state, refreshes: list[Refresh], still: float, clean: bool = True) -> bool:
    """The counter intervals between ``refreshes`` draw the same, to within 3 σ (``still``: how the idle
    moves at rest, or √2 × a rate's own noise where larger; an unknown σ: taken as flat). ``clean``: and
    each interval's refreshes are located to within 5 % of it (a refresh a failed read hid is not: its
    rate says nothing of the idle); else such intervals are left out."""
    if not math.isfinite(still):
        return True
    rates = counter_rates(state, state.primary, refreshes)
    kept, noise = [], still
    for one, two, rate in zip(refreshes, refreshes[1:], rates):
        if not math.isfinite(rate) or one.halfwidth + two.halfwidth > 0.05 * (two.t - one.t):
            if clean:
                return False
            continue
        kept.append(rate)
        noise = max(noise, math.sqrt(2) * own_noise(state, one, two, rate))
    return not kept or max(kept) - min(kept) <= 3 * noise
