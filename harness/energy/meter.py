"""Energy meters: the seam the runner uses.

``meter.measure(label, workload)`` runs the workload (once, or repeated where the source needs
it; see :mod:`harness.energy.protocol`) and returns one :class:`Measurement`: the results of the
measured runs and one :class:`EnergyReading` for them. ``start_window(label)`` /
``stop_window(handle)`` bracket any region (windows may nest and overlap; a window holds a few
cumulative values, never the samples in it). Every window opens and closes after a device
synchronise.

Every meter also records host energy (CPU package, DRAM) from RAPL where the machine exposes it
(:mod:`harness.energy.host`), so a CPU-only run has host J/token too.
"""
from __future__ import annotations

import contextlib
import math
import random
import statistics
import time
import warnings
from dataclasses import dataclass, field
from typing import Callable, Generic, TypeVar

from harness.energy.attribution import Attribution, attribute
from harness.energy.config import EnergyConfig
from harness.energy.gpustate import cool_down, gpu_state, summarize_state
from harness.energy.hardware import UNKNOWN, apply_profile, power_semantics
from harness.energy.host import GROUPS, HostEnergy, host_delta
from harness.energy.idle import IdleTracker
from harness.energy.phases import covers_period, largest_gap, phase_of, refine_period
from harness.energy.protocol import infer_update_periods, phase_delay, run_counter, run_polled
from harness.energy.reading import NAN, EnergyReading
from harness.energy.sampler import COUNTER, HOLD, RealClock, Sampler
from harness.energy.sources import Sources, open_sources
from harness.energy.windows import Window, device_energy
from harness.errors import ConfigError

T = TypeVar("T")
# how far a GPU's power may be from the tracked idle right after a synchronise (it takes a few ms to
# fall) or between two idle measurements, as a fraction of idle: the floor of the edges' uncertainty
IDLE_FLOOR = 0.10


@dataclass
class Measurement(Generic[T]):
    """What :meth:`EnergyMeter.measure` returns: every measured run's result (a repeated
    measurement runs the workload several times; ``result`` is the first) and one reading."""

    results: list[T]
    reading: EnergyReading
    windows: list[tuple[float, float]] = field(default_factory=list)  # measured (start, end) per trial (clock time)

    @property
    def result(self) -> T:
        return self.results[0]

    @property
    def repetitions(self) -> int:
        return len(self.results)

    def as_record(self, tokens: Callable[[T], int], prefix: str = "energy.") -> dict:
        """``energy.*`` record fields, J/token over the tokens of every measured run
        (``tokens(result)`` counts one run's new tokens)."""
        return self.reading.as_record(new_tokens=sum(tokens(r) for r in self.results), prefix=prefix)

    def __iter__(self):  # the former (results, reading) tuple; kept one release for callers not yet updated
        warnings.warn("unpacking EnergyMeter.measure(...) as (results, reading) is deprecated; use the "
                      "Measurement's .results/.result and .reading", DeprecationWarning, stacklevel=2)
        return iter((self.results, self.reading))


class EnergyMeter:
    """Interface. ``measure`` runs ``workload`` (possibly several times, as the source requires)
    and returns the result of every measured run with one reading for them."""

    def measure(self, label: str, workload: Callable[[], T]) -> Measurement[T]:
        raise NotImplementedError

    def start_window(self, label: str) -> Window:
        raise NotImplementedError

    def stop_window(self, handle: Window) -> EnergyReading:
        raise NotImplementedError

    def describe(self) -> dict:
        return {}

    def gpu_state(self) -> dict:
        """The ``gpu_state`` summary of the cell so far (state at start, now, flags)."""
        return summarize_state(None, None)

    def attribute(self, a: float, b: float, labels: dict[str, list[tuple[float, float]]]) -> Attribution:
        names = list(labels) + ["other"]
        nan = {n: NAN for n in names}
        return Attribution(nan, nan, nan, 0, NAN, "no energy counter: sub-window attribution needs one")

    def close(self) -> None:
        pass

    def __enter__(self):
        return self

    def __exit__(self, *exc):
        self.close()


def _host_fields(host: HostEnergy | None, start: dict | None, end: dict | None, runs: int = 1) -> dict:
    """Host energy fields of a reading (per run)."""
    if host is None:
        return {"host_reason": "host energy not measured (energy.host=false)"}
    if not host.available:
        return {"host_reason": host.reason}
    delta = host_delta(start, end)
    cpu, dram = delta["cpu"] / runs, delta["dram"] / runs
    total = cpu + (dram if math.isfinite(dram) else 0.0)
    missing = "; ".join(f"{g}: {host.missing[g]}" for g in ("dram",) if g in host.missing)
    return {"host_cpu_energy_j": cpu, "host_dram_energy_j": dram, "host_energy_j": total,
            "host_platform_energy_j": delta["platform"] / runs,
            "host_reason": (missing or None) if math.isfinite(cpu) else "host energy read failed"}


def _read_host(host: HostEnergy | None) -> dict | None:
    return host.read() if host is not None and host.available else None


class NullMeter(EnergyMeter):
    """No GPU power source: run the workload once; GPU energy is NaN with the reason; time (and
    host energy, where RAPL is readable) is still taken."""

    def __init__(self, reason: str, host: HostEnergy | None = None):
        self.reason, self.host = reason, host

    def measure(self, label, workload):
        window = self.start_window(label)
        result = workload()
        reading = self.stop_window(window)
        return Measurement([result], reading, [(window.start, window.start + reading.duration_s)])

    def start_window(self, label: str) -> Window:
        return Window(label, time.perf_counter(), host=_read_host(self.host))

    def stop_window(self, handle: Window) -> EnergyReading:
        seconds = time.perf_counter() - handle.start
        return EnergyReading(duration_s=seconds, measured_s=seconds, label=handle.label, reason=self.reason,
                             **_host_fields(self.host, handle.host, _read_host(self.host)))

    def describe(self) -> dict:
        return {"energy_source": "none", "energy_reason": self.reason,
                **(self.host.describe() if self.host is not None else {})}

    def gpu_state(self) -> dict:
        return summarize_state(None, None, self.reason)


def _t975(dof: int) -> float:
    from scipy.stats import t

    return float(t.ppf(0.975, dof))


class GpuEnergyMeter(EnergyMeter):
    """Meters the GPUs behind ``sources``; see :mod:`harness.energy.protocol` for the procedure.

    ``activity`` (a context-manager factory) wraps each run of a workload — the simulated source
    uses it to draw power while the decoder runs; ``exact`` / ``exact_net`` give a simulator's true
    energy over an interval, recorded beside the estimate."""

    def __init__(self, sources: Sources, cfg: EnergyConfig, clock=None, synchronize: Callable[[], None] | None = None,
                 *, activity: Callable | None = None, host: HostEnergy | None = None,
                 exact: Callable[[float, float], float] | None = None,
                 exact_net: Callable[[float, float], float] | None = None):
        self.cfg, self.sources = cfg, sources
        self.clock = clock or RealClock()
        self.synchronize = synchronize or (lambda: None)
        self.activity = activity or contextlib.nullcontext
        self.host, self.exact, self.exact_net = host, exact, exact_net
        self.rng = random.Random(cfg.seed)
        self.profile_note = self._apply_profile()
        use_counter = cfg.source in ("auto", "counter", "simulated") and sources.counter is not None
        self.primary = sources.counter if use_counter else sources.power
        self.cross_check = sources.power if self.primary is sources.counter else None
        if self.primary.kind == "energy":
            self.estimator = "counter"
        else:
            self.estimator = "sum" if cfg.integration == "sum" else "trapezoid"
        self.devices = len(self.primary.handles)
        self.refreshes: dict[str, list] = {}  # channel → device 0's refreshes seen by the meter's own polling
        self.cooldown = self._cool_down() if cfg.cooldown_s > 0 else {}
        self.state_start = gpu_state(sources.nvml, sources.devices) if sources.nvml is not None else None
        channels = [c for c in (self.primary, self.cross_check) if c is not None]
        self.sampler = Sampler(channels, self.clock, cfg.interval_s, cfg.skip_unchanged, cfg.align_timestamps,
                               keep_s=cfg.keep_samples_s)
        if self.host is not None and self.host.available:
            self._host_due = -math.inf
            self.sampler.extra.append(self._host_tick)
        self.idle = IdleTracker(self.devices)
        self.sampler.start()
        started = self.clock.now()
        self.update_periods = (infer_update_periods(channels, self.clock, cfg.infer_update_period_s,
                                                    seen=self.refreshes) if cfg.infer_update_period_s > 0 else {})
        for channel in channels:
            self.sampler.set_update_period(channel.name, self.update_period(channel))
        self.idle_power_w, self.idle_reason = self._idle_baseline(started)

    # ---- set-up -------------------------------------------------------------------------
    def _apply_profile(self) -> str | None:
        """Use the ``conf/gpu`` profile's power figures if it matches the GPUs in use."""
        profile, power = self.cfg.gpu or {}, self.sources.power
        names = [d.name for d in self.sources.devices]
        match = profile.get("match") or []
        if match and names and not all(any(m.lower() in n.lower() for m in match) for n in names):
            return f"gpu profile '{profile.get('name')}' (matches {match}) does not fit {names}; using detected figures"
        if power is not None:
            if power.semantics == UNKNOWN and profile.get("architecture"):
                power.semantics = power_semantics(profile["architecture"], names[0] if names else "", power.field)
            power.semantics = apply_profile(power.semantics, profile)
        return None

    def _cool_down(self) -> dict:
        nvml, handles = self.sources.nvml, [d.handle for d in self.sources.devices]
        if nvml is None:
            return {"cooldown_reason": "no NVML: no temperature to wait on"}
        power = self.sources.power
        last: list = []

        def read_power() -> float:
            if power is not None:
                return sum(power.read())
            now, joules = self.clock.now(), sum(self.primary.read())
            watts = (joules - last[1]) / (now - last[0]) if last and now > last[0] else 0.0
            last[:] = [now, joules]
            return watts

        return cool_down(lambda: sum(nvml.nvmlDeviceGetTemperature(h, nvml.NVML_TEMPERATURE_GPU) for h in handles),
                         read_power, self.clock, self.cfg.cooldown_s, self.cfg.cooldown_window_s,
                         self.cfg.cooldown_temperature_c, self.cfg.cooldown_power)

    def _host_tick(self) -> None:
        """Read RAPL about once a second from the sampler thread, so counter wraps are never missed."""
        now = self.clock.now()
        if now >= self._host_due:
            self._host_due = now + 1.0
            self.host.read()

    def _idle_baseline(self, started: float) -> tuple[float, str | None]:
        if self.cfg.idle_baseline_s <= 0:
            return NAN, "no idle baseline at start (energy.idle_baseline_s=0); idle is measured after each window"
        remaining = started + self.cfg.idle_baseline_s - self.clock.now()
        if remaining > 0:
            self.clock.sleep(remaining)
        end = self.clock.now()
        self.await_settled(end)
        start = started + (self.power_window(self.primary) or 0.0) if self.primary.kind == "power" else started
        watts = self.device_powers(self.primary, start, end)
        failure = self._failure(self.primary, end)
        if failure is not None or not all(math.isfinite(w) for w in watts):
            return NAN, failure or f"{self.primary.name} gave too few readings in the idle baseline"
        self.idle.add((start + end) / 2, watts)
        return sum(watts), None

    # ---- what the sensors mean -------------------------------------------------------------
    def update_period(self, channel) -> float:
        """Inferred update period of ``channel``, else the documented one, else the median spacing
        of consecutive refreshes the meter's own polling saw, else NaN."""
        inferred = self.update_periods.get(channel.name, NAN)
        if math.isfinite(inferred):
            return inferred
        documented = channel.semantics.update_s if channel.semantics is not None else None
        if documented is not None:
            return documented
        seen = sorted(r.t for r in self.refreshes.get(channel.name, []))
        spacings = [b - a for a, b in zip(seen, seen[1:]) if 0 < b - a < 1.0]
        return statistics.median(spacings) if spacings else NAN

    @staticmethod
    def power_window(channel) -> float | None:
        """Averaging window of a power reading (None: not known)."""
        return channel.semantics.window_s if channel.kind == "power" and channel.semantics is not None else None

    def phase_shifting(self) -> bool:
        """Phase shifting applies to a part-time power reading (window shorter than its period)."""
        power = self.primary
        if power.kind != "power" or self.cfg.phase_shifts == 1:
            return False
        window, update = self.power_window(power), self.update_period(power)
        return window is not None and math.isfinite(update) and window < update

    def phase_delay(self, elapsed_s: float, trial: int) -> float:
        """Delay from a refresh seen ``elapsed_s`` ago until trial ``trial``'s phase (0 when phase
        shifting does not apply)."""
        if not self.phase_shifting():
            return 0.0
        return phase_delay(elapsed_s, trial, min(self.cfg.phase_shifts, self.cfg.trials),
                           self.update_period(self.primary))

    def refined_period(self, channel, refreshes) -> tuple[float, float]:
        """The update period (± its uncertainty, s) refined from refreshes seen many periods apart;
        the inferred or documented period is taken as known to ± one poll of inference (1 ms)."""
        return refine_period(refreshes, self.update_period(channel), 1e-3)

    def trial_phase(self, trial, refreshes) -> tuple[float, float]:
        return phase_of(trial.opened, refreshes, *self.refined_period(self.primary, refreshes))

    # ---- running and waiting ----------------------------------------------------------------
    def run_once(self, workload: Callable[[], T], anchor: bool = False):
        """Run ``workload`` once (inside ``activity``), synchronise; (start, result, end), and with
        ``anchor`` also an anchor at ``start`` — registered before the run, so that the readings
        around it are kept however long the run lasts."""
        start = self.clock.now()
        handle = self.sampler.anchor(start) if anchor else None
        with self.activity():
            result = workload()
        self.synchronize()
        end = self.clock.now()
        return (start, result, end, handle) if anchor else (start, result, end)

    def host_read(self) -> dict | None:
        return _read_host(self.host)

    def idle_due(self) -> bool:
        every = self.cfg.idle_every_s
        return every is not None and self.clock.now() - self.idle.last_added >= every

    def watch_tail(self, channel, b: float, timeout: float):
        """After a window's end ``b`` (GPU idle): wait for the next refresh of every device — and
        for one more when an idle measurement is due, which then gives one period of idle power."""
        from harness.energy.phases import RefreshWatcher

        due = self.idle_due()
        seen = RefreshWatcher(channel, self.clock, self.cfg.phase_poll_s).until_refreshes(
            2 if due else 1, timeout + (self.update_period(channel) if due else 0.0))
        if due and all(len(s) >= 2 for s in seen):
            watts = [(s[1].value - s[0].value) / self._refresh_spacing(channel, s[0], s[1]) for s in seen]
            self.idle.add(statistics.mean((s[0].t + s[1].t) / 2 for s in seen), watts)
        return seen

    def snap_to_refreshes(self, channel, times: list[float]) -> list[float]:
        """The sampler's timestamps of device 0's refreshes (± half a poll) moved onto the refresh
        grid the meter's own 1 ms polling located (± microseconds once the period is refined)."""
        seen = self.refreshes.get(channel.name, [])
        period, sigma = refine_period(seen, self.update_period(channel), 1e-3)
        if not seen or not math.isfinite(period):
            return list(times)
        ref = seen[-1].t
        out = []
        for t in times:
            n = round((t - ref) / period)
            grid = ref + n * period
            ok = abs(n) * sigma + seen[-1].halfwidth < self.cfg.interval_s / 4 and abs(t - grid) <= self.cfg.interval_s
            out.append(grid if ok else t)
        return out

    def note_refreshes(self, channel, seen) -> None:
        """Keep device 0's observed refreshes of ``channel`` (to refine its update period)."""
        kept = self.refreshes.setdefault(channel.name, [])
        kept.extend(seen[0] if seen else [])
        del kept[:-256]

    def _refresh_spacing(self, channel, first, second) -> float:
        """Time between two refreshes: the refined period × the periods between them where that agrees
        with the observed times (a counter on a regular grid: ±µs instead of ± a millisecond poll)."""
        observed = second.t - first.t
        period, sigma = refine_period(self.refreshes.get(channel.name, []), self.update_period(channel), 1e-3)
        if math.isfinite(period) and sigma < 1e-4:
            n = round(observed / period)
            if n >= 1 and abs(n * period - observed) <= first.halfwidth + second.halfwidth + n * sigma:
                return n * period
        return observed

    def idle_from_watch(self, watcher, idle_since: float, period: float, window: float) -> None:
        """Idle power from the power readings the meter's own polling saw while the GPU was idle
        (since ``idle_since``): every refresh whose averaging window lies after ``idle_since``, and
        the current reading if it is recent enough. Independent of the sampler thread's rate."""
        if watcher.error is not None or watcher.last is None:
            return
        now = self.clock.now()
        watts, times = [], []
        for d, seen in enumerate(watcher.seen):
            values = [(r.t, r.value) for r in seen if r.t - r.halfwidth - window >= idle_since]
            if now - period - window >= idle_since:
                values.append((now, watcher.last[d]))
            if not values:
                return
            watts.append(sum(v for _, v in values) / len(values))
            times += [t for t, _ in values]
        self.idle.add((min(times) + max(times)) / 2, watts)

    def device_powers(self, channel, a: float, b: float) -> list[float]:
        """Mean power per device over [a, b] from retained readings (counter: slope between the
        first and last refreshes inside; power: held readings)."""
        out = []
        for s in self.sampler.snapshot(channel.name):
            if channel.kind == "energy":
                inside = [(t, v) for t, v in zip(s.times, s.values) if a <= t <= b]
                ok = len(inside) >= 2 and inside[-1][0] > inside[0][0]
                out.append((inside[-1][1] - inside[0][1]) / (inside[-1][0] - inside[0][0]) if ok else NAN)
            else:
                out.append(s.energy(a, b, HOLD) / (b - a) if b > a and s.times else NAN)
        return out

    def await_settled(self, t: float, channels=None) -> None:
        """Wait (at most about two update periods) until the readings around ``t`` are final (of
        ``channels``; default all)."""
        if self.estimator == "sum":
            return
        channels = channels or self.sampler.channels
        periods = [self.update_period(c) for c in channels]
        longest = max((p for p in periods if math.isfinite(p)), default=0.1)
        deadline = self.clock.now() + 2 * longest + 3 * self.cfg.interval_s + (self.power_window(self.primary) or 0) / 2
        names = [c.name for c in channels]
        while not self.sampler.settled(t, names) and self.clock.now() < deadline:
            self.clock.sleep(self.cfg.interval_s)

    def power_limit_w(self) -> float:
        """Sum of the GPUs' enforced power limits (W), NaN where NVML does not say."""
        limits = [d.get("power_limit_w") for d in (self.state_start or [])]
        return sum(limits) if limits and all(x is not None for x in limits) else NAN

    def _failure(self, channel, before: float) -> str | None:
        for s in self.sampler.series[channel.name]:
            if s.failed_at is not None and s.failed_at <= before:
                return f"{s.failure} (at t={s.failed_at:.3f} s)"
        return None

    # ---- measuring ------------------------------------------------------------------------
    def measure(self, label, workload) -> Measurement:
        if not self.cfg.protocol:
            window = self.start_window(label)
            _, result, end = self.run_once(workload)
            return Measurement([result], self.stop_window(window), [(window.start, end)])
        run = run_counter if self.primary.kind == "energy" else run_polled
        results, reading, trials = run(self, label, workload)
        return Measurement(results, reading, [(t.a, t.b) for t in trials])

    def start_window(self, label: str) -> Window:
        self.synchronize()
        t = self.clock.now()
        return Window(label, t, self.sampler.anchor(t), self.host_read())

    def stop_window(self, handle: Window) -> EnergyReading:
        self.synchronize()
        end = self.clock.now()
        host_end = self.host_read()
        self.await_settled(end)
        reading = self._window_reading(handle, end, host_end)
        self.sampler.release(handle.anchor)
        return reading

    # ---- readings -------------------------------------------------------------------------
    def _values(self, where, channel) -> list[dict]:
        return self.sampler.values(where)[channel.name]["series"]

    def _polled_cross_check(self, spans) -> tuple[float, float]:
        """Polled (trapezoid) energy over ``spans`` [(anchor_a, b)], and that estimate's own bound."""
        power = self.cross_check
        if power is None:
            return NAN, NAN
        if self._failure(power, max(b for _, b in spans)) is not None:
            return NAN, NAN
        total, n, s1, s2, seconds = 0.0, 0, 0.0, 0.0, 0.0
        for anchor, b in spans:
            va, vb = self._values(anchor, power), self._values(b, power)
            for x, y in zip(va, vb):
                total += y["linear"] - x["linear"]
                n += y["count"][0] - x["count"][0]
                s1 += y["count"][1] - x["count"][1]
                s2 += y["count"][2] - x["count"][2]
            seconds += b - anchor.t
        period, window = self.update_period(power), self.power_window(power)
        part = min(1.0, window / period) if window is not None and math.isfinite(period) else 0.0
        mean_r = s1 / n if n else NAN
        cv = math.sqrt(max(s2 / n - mean_r ** 2, 0.0)) / mean_r if n > 1 and mean_r > 0 else 0.0
        mean_w = total / seconds if seconds > 0 else NAN
        idle = sum(self.idle.at((spans[0][0].t + spans[-1][1]) / 2))
        dynamic = max(mean_w - idle, 0.0) / mean_w if math.isfinite(idle) and mean_w > 0 else 1.0
        edges = 2 * len(spans) * ((window or period) / 2 + (period if math.isfinite(period) else 0.1)) / seconds
        bound = 2 * cv * math.sqrt((1 - part) / max(n / max(self.devices, 1), 1)) + edges * dynamic
        return total, bound

    def _common(self, label: str, mode: str, spans: list[tuple[float, float]], runs: list[int], energies: list[float],
                anchors: list, hosts: list, reason: str | None, bound: float, basis: str, stratified: bool = False,
                **extra) -> EnergyReading:
        """Fields every reading shares, from per-trial gross energies over ``spans``. ``stratified``:
        trials are strata (phases of the update period) and weigh equally, whatever their runs."""
        total_runs, measured = sum(runs), sum(b - a for a, b in spans)
        total = sum(energies) if reason is None else NAN
        if stratified and reason is None:
            total = statistics.mean(e / n for e, n in zip(energies, runs)) * total_runs
        idle = sum(sum(self.idle.energy(a, b)) for a, b in spans)
        spread = NAN
        if len(spans) > 1 and reason is None:
            per_run = [e / n for e, n in zip(energies, runs)]
            spread = statistics.stdev(per_run) / statistics.mean(per_run)
        polls = seen = missed = 0.0
        for (anchor_a, anchor_b) in anchors:
            pa = self.sampler.values(anchor_a)[self.primary.name]["polls"]
            pb = self.sampler.values(anchor_b)[self.primary.name]["polls"]
            polls, seen, missed = polls + pb[0] - pa[0], seen + pb[1] - pa[1], missed + pb[2] - pa[2]
        window, period = self.power_window(self.primary), self.update_period(self.primary)
        if self.primary.kind == "energy":
            coverage = 1.0
        elif window is not None and math.isfinite(period) and measured > 0:
            coverage = min(1.0, seen * min(window, period) / measured)
        else:
            coverage = NAN
        polled, polled_bound = extra.pop("polled", (NAN, NAN))
        diff = (polled - total) / total if math.isfinite(polled) and math.isfinite(total) and total else NAN
        flag = None if math.isnan(diff) else abs(diff) > max(self.cfg.cross_check_tolerance, polled_bound)
        host = {g: 0.0 for g in GROUPS}
        for start, end in hosts:
            for g, v in host_delta(start, end).items():
                host[g] += v
        host_fields = _host_fields(self.host, {g: 0.0 for g in GROUPS}, host, total_runs) if hosts else \
            _host_fields(self.host, None, None)
        exact = exact_net = NAN
        if self.exact is not None:
            exact = sum(self.exact(a, b) for a, b in spans) / total_runs
            exact_net = sum(self.exact_net(a, b) for a, b in spans) / total_runs if self.exact_net else NAN
        # net: idle over the window known to ± twice the scatter of the idle measurements around it
        # (≥ 1 % of idle); with fewer than two measurements, ± IDLE_FLOOR (the drift is unknown)
        scatter = self.idle.spread(spans[0][0], spans[-1][1])
        idle_w = idle / measured if measured > 0 else NAN
        idle_unc = max(2 * scatter, 0.01 * idle_w) if math.isfinite(scatter) else IDLE_FLOOR * idle_w
        net = total - idle
        net_bound = (bound * total + idle_unc * measured) / net if net > 0 and reason is None else NAN
        return EnergyReading(
            source=self.primary.name, energy_j=total / total_runs, net_energy_j=(total - idle) / total_runs,
            total_energy_j=total, mean_power_w=total / measured if measured > 0 else NAN,
            idle_power_w=idle / measured if measured > 0 else NAN, duration_s=measured / total_runs,
            measured_s=measured, samples=round(seen) if math.isfinite(seen) else 0,
            coverage=coverage if reason is None else NAN, repetitions=total_runs, trials=len(spans),
            trial_spread=spread, polled_energy_j=polled / total_runs, update_period_s=period, mode=mode,
            error_bound=bound if reason is None else NAN, net_error_bound=net_bound, error_basis=basis,
            poll_hz=polls / measured if measured > 0 else NAN, missed_refreshes=missed,
            cross_check_diff=diff, cross_check_flag=flag, simulated_exact_energy_j=exact,
            simulated_exact_net_energy_j=exact_net, label=label, reason=reason, **host_fields, **extra)

    def counter_reading(self, label: str, trials, single: bool) -> EnergyReading:
        """Counter windows: edges at observed refreshes where the GPU was idle between refresh and
        edge (exact up to idle × gap), interpolated otherwise. Nothing is awaited when every edge sits
        on a refresh; the polled cross-check then uses the power readings seen so far."""
        if any(not t.aligned or any(r is None for r in t.tail) or len(t.tail) < self.devices for t in trials):
            self.await_settled(max(t.b for t in trials), [self.primary])
        reason = self._failure(self.primary, self.clock.now())
        period = self.update_period(self.primary)
        energies, edge_err, aligned_edges, interpolated_edges = [], 0.0, 0, 0
        for trial in trials:
            va, vb = self._values(trial.anchor_a, self.primary), self._values(trial.anchor_b, self.primary)
            idle_a, idle_b = self.idle.at(trial.a), self.idle.at(trial.b)
            spread = self.idle.spread(trial.a, trial.b)
            energy = 0.0
            for d in range(self.devices):
                unc = max(2 * spread / self.devices if math.isfinite(spread) else 0.0, IDLE_FLOOR * idle_b[d]) \
                    if math.isfinite(idle_b[d]) else NAN
                lead = trial.lead[d] if trial.aligned and d < len(trial.lead) else None
                if lead is not None and math.isfinite(idle_a[d]):
                    start = lead.value + idle_a[d] * (trial.a - lead.t)
                    edge_err += (trial.a - lead.t) * unc + lead.halfwidth * idle_a[d]
                    aligned_edges += 1
                else:
                    start = va[d][COUNTER]
                    interpolated_edges += 1
                tail = trial.tail[d] if d < len(trial.tail) else None
                if tail is not None and math.isfinite(idle_b[d]):
                    end = tail.value - idle_b[d] * (tail.t - trial.b)
                    edge_err += (tail.t - trial.b) * unc + tail.halfwidth * idle_b[d]
                    aligned_edges += 1
                else:
                    end = vb[d][COUNTER]
                    interpolated_edges += 1
                energy += end - start
            energies.append(energy)
        if reason is None and not all(math.isfinite(e) for e in energies):
            reason = (f"{self.primary.name}: a window edge is not bracketed by counter updates (window shorter than "
                      "the update period, or at the edge of the readings)")
        total = sum(energies)
        measured = sum(t.b - t.a for t in trials)
        mean_w = total / measured if measured > 0 and math.isfinite(total) else NAN
        p_eff = period if math.isfinite(period) else 0.1
        edge_err += interpolated_edges * 0.5 * p_eff * (mean_w if math.isfinite(mean_w) else 0.0)
        resolution = 2e-3 * self.devices * len(trials)
        bound = (edge_err + resolution) / total if math.isfinite(total) and total > 0 else NAN
        runs = [t.runs for t in trials]
        basis = (f"NVML energy counter (update {p_eff * 1e3:.0f} ms), {'one run' if single else f'{sum(runs)} runs in {len(trials)} trials'}; "
                 f"{aligned_edges} edge(s) on observed refreshes with the GPU idle in between (idle ± max(2 × its scatter, 10 %)), "
                 f"{interpolated_edges} interpolated (± half an update at the mean power); 1 mJ counter resolution")
        polled = self._polled_cross_check([(t.anchor_a, t.b) for t in trials]) if self.cross_check else (NAN, NAN)
        reading = self._common(label, "counter-aligned", [(t.a, t.b) for t in trials], runs, energies,
                               [(t.anchor_a, t.anchor_b) for t in trials], [(t.host_a, t.host_b) for t in trials],
                               reason, bound, basis, polled=polled)
        for t in trials:
            self.sampler.release(t.anchor_a)
            self.sampler.release(t.anchor_b)
        return reading

    def polled_reading(self, label: str, trials, refreshes) -> EnergyReading:
        """Polled trials: held readings over [a, b + W + 1.5 P], idle subtracted over the extension.

        Expected error (≈ 95 %), by case:

        * part-time reading, trials' phases verified to tile the update period: the trials are
          strata; the error is the readings' sampling noise within each trial, 2·sqrt(Σ_k SE_k²)/K
          with SE_k = cv_k·sqrt(1 − W/P)/sqrt(n_k) (a load locked to the sensor shows no noise
          within a trial and tiles exactly), plus the tiling mismatch (gaps off 1/K times how much
          the trials differ);
        * part-time, phases not verified: a t-interval over trials (or the readings' noise) plus
          the aliasing a part-time reading can suffer — the unseen fraction of each period times
          the load's dynamic power — since the trials may all have looked at the same phase;
        * full coverage (averaging window ≥ update period): a t-interval over trials, or none from
          sampling with one trial;
        * always: the tracked idle's uncertainty over the extensions past each window.
        """
        power = self.primary
        self.await_settled(max(t.ext_b for t in trials))
        reason = self._failure(power, self.clock.now())
        period, window = self.update_period(power), self.power_window(power)
        p_eff = period if math.isfinite(period) else 0.1
        energies, stats = [], []
        idle_unc_j = 0.0
        for trial in trials:
            va, vb, ve = (self._values(trial.anchor_a, power), self._values(trial.anchor_b, power),
                          self._values(trial.anchor_ext, power))
            idle_ext = self.idle.energy(trial.b, trial.ext_b)
            spread = self.idle.spread(trial.a, trial.ext_b)
            energy, n, s1, s2 = 0.0, 0, 0.0, 0.0
            for d in range(self.devices):
                energy += ve[d][HOLD] - va[d][HOLD] - idle_ext[d]
                n += vb[d]["count"][0] - va[d]["count"][0]
                s1 += vb[d]["count"][1] - va[d]["count"][1]
                s2 += vb[d]["count"][2] - va[d]["count"][2]
            mean_r = s1 / n if n else NAN
            cv = math.sqrt(max(s2 / n - mean_r ** 2, 0.0)) / mean_r if n > 1 and mean_r > 0 else 0.0
            stats.append((cv, max(n / self.devices, 1.0)))
            idle_w = sum(self.idle.at(trial.b))
            unc = max(2 * spread if math.isfinite(spread) else 0.0, IDLE_FLOOR * idle_w) if math.isfinite(idle_w) else NAN
            idle_unc_j += unc * (trial.ext_b - trial.b)
            energies.append(energy)
        if reason is None and not all(math.isfinite(e) for e in energies):
            reason = f"{power.name}: no idle power measured around the trials (needed at the window's edges)"
        runs = [t.runs for t in trials]
        total, measured = sum(energies), sum(t.b - t.a for t in trials)
        mean_w = total / measured if measured > 0 else NAN
        idle_w = sum(sum(self.idle.energy(t.a, t.b)) for t in trials) / measured if measured > 0 else NAN
        dynamic = max(mean_w - idle_w, 0.0) / mean_w if math.isfinite(idle_w) and mean_w > 0 else 1.0
        part = min(1.0, window / period) if window is not None and math.isfinite(period) else NAN
        per_run = [e / r for e, r in zip(energies, runs)]
        finite = all(math.isfinite(e) for e in per_run) and statistics.mean(per_run) > 0
        k = len(trials)
        mean_run = statistics.mean(per_run) if finite else NAN
        unseen = 1 - (part if math.isfinite(part) else 0.0)
        sampling = 2 * math.sqrt(sum((cv * math.sqrt(unseen / n) * m) ** 2 for (cv, n), m in zip(stats, per_run))) / (
            k * mean_run) if finite else NAN
        t_interval = (_t975(k - 1) * statistics.stdev(per_run) / math.sqrt(k) / mean_run) if finite and k > 1 else NAN
        verified, gap, alias, tiling = None, NAN, 0.0, 0.0
        if unseen > 0:  # part-time (or unknown window): phases matter
            ref_period, _ = self.refined_period(power, refreshes)
            phases = [self.trial_phase(t, refreshes) for t in trials]
            verified = bool(math.isfinite(part) and covers_period([p for p, _ in phases], [s for _, s in phases],
                                                                  window, ref_period))
            if all(math.isfinite(p) for p, _ in phases):
                gap = largest_gap([p for p, _ in phases])
            if verified and finite:
                # tiling mismatch: gaps off 1/K (as estimated), and each trial's phase uncertainty times how
                # fast the trials' readings change with phase (from neighbouring trials)
                order = sorted(range(k), key=lambda i: phases[i][0])
                m = [per_run[i] for i in order]
                gaps = [((phases[order[(j + 1) % k]][0] - phases[order[j]][0]) % 1.0) for j in range(k)]
                tiling = sum(abs(g - 1 / k) * abs(m[j] - mean_run) for j, g in enumerate(gaps))
                tiling += sum((abs(m[j] - m[j - 1]) + abs(m[(j + 1) % k] - m[j])) / 2 / (1 / k)
                              * phases[order[j]][1] / ref_period / k for j in range(k))
                tiling /= mean_run
                stat, stat_basis = sampling + tiling, (f"stratified over {k} phases verified to tile the update period: "
                                                       f"readings' noise {100 * sampling:.2f} % + tiling {100 * tiling:.2f} %")
            else:
                # the unseen fraction of each period could have drawn anything from idle to the power limit
                limit = self.power_limit_w()
                ceiling = max(limit - mean_w, mean_w - idle_w) / mean_w if math.isfinite(limit) and mean_w > 0 \
                    else max(dynamic, 1.0)
                alias = unseen * ceiling
                stat = t_interval if math.isfinite(t_interval) else sampling
                stat_basis = (f"{'t-interval over trials' if math.isfinite(t_interval) else 'readings noise'} "
                              f"{100 * stat:.2f} % + aliasing of a part-time reading {100 * alias:.1f} % (trial phases "
                              "not known to tile the update period)")
        else:
            stat = t_interval if math.isfinite(t_interval) else 0.0
            stat_basis = (f"t-interval over {k} trials {100 * stat:.2f} %" if math.isfinite(t_interval)
                          else "full coverage, one trial: no sampling error")
        idle_term = idle_unc_j / total if total > 0 and math.isfinite(idle_unc_j) else 0.0
        bound = stat + alias + idle_term
        w_text = f"{window * 1e3:.0f} ms" if window is not None else "unknown (taken as one update)"
        basis = (f"{power.name} polled (update {p_eff * 1e3:.1f} ms, averaging {w_text}), {sum(runs)} runs in {k} "
                 f"trials, each integrated over its window + averaging window + 1.5 updates of idle: {stat_basis}; "
                 f"idle at the edges {100 * idle_term:.2f} %")
        reading = self._common(label, "polled-trials", [(t.a, t.b) for t in trials], runs, energies,
                               [(t.anchor_a, t.anchor_b) for t in trials], [(t.host_a, t.host_b) for t in trials],
                               reason, bound, basis, stratified=True, phase_gap=gap, phases_verified=verified)
        for t in trials:
            for anchor in (t.anchor_a, t.anchor_b, t.anchor_ext):
                self.sampler.release(anchor)
        return reading

    def _window_reading(self, handle: Window, end: float, host_end: dict | None) -> EnergyReading:
        """A free window [start, end]: estimator over the sampler's cumulative values."""
        a, b = handle.start, end
        reason = self._failure(self.primary, b)
        va, vb = self._values(handle.anchor, self.primary), self._values(b, self.primary)
        energy, edge_err = 0.0, 0.0
        for d in range(self.devices):
            if self.primary.kind == "energy":
                part, err = counter_window_energy(va[d], vb[d], a, b)
                edge_err += err
                if math.isnan(part) and reason is None:
                    reason = (f"{self.primary.name}: window of {b - a:.3f} s is not bracketed by counter updates "
                              "(shorter than the update period, or at the edge of the readings)")
                energy += part
                continue
            part = device_energy(va[d], vb[d], self.estimator, self.cfg.interval_s, b - a, self.primary.name)
            reason = reason or part.reason
            energy += part.energy_j
        period = self.update_period(self.primary)
        p_eff = period if math.isfinite(period) else 0.1
        mean_w = energy / (b - a) if b > a else NAN
        if self.primary.kind == "energy":
            bound = (edge_err + 2e-3 * self.devices) / energy if energy > 0 else NAN
            basis = ("NVML energy counter, one window: each edge extrapolated from the power of the counter interval "
                     "next to it inside the window (± half the difference from the interval straddling it), or "
                     "interpolated when the window holds fewer than three refreshes")
            mode = "counter-window"
        else:
            window = self.power_window(self.primary)
            part = min(1.0, window / period) if window is not None and math.isfinite(period) else 0.0
            edges = 2 * ((window or p_eff) / 2 + p_eff) / (b - a) if b > a else NAN
            bound = edges + (1 - part)
            basis = (f"{self.primary.name} polled, one window ({self.estimator}): edges ± (half the averaging window "
                     "+ one update) at full power; part-time readings unshifted (aliasing up to the unseen fraction)")
            mode = "polled-window"
        polled = self._polled_cross_check([(handle.anchor, b)]) if self.cross_check else (NAN, NAN)
        return self._common(handle.label, mode, [(a, b)], [1], [energy], [(handle.anchor, b)],
                            [(handle.host, host_end)], reason, bound, basis, polled=polled)

    # ---- reporting and shutdown --------------------------------------------------------------
    def gpu_state(self) -> dict:
        if self.sources.nvml is None:
            return summarize_state(None, None, "no NVML")
        return summarize_state(self.state_start, gpu_state(self.sources.nvml, self.sources.devices))

    def attribute(self, a: float, b: float, labels: dict[str, list[tuple[float, float]]],
                  idle_around: bool = True) -> Attribution:
        """Split the counter energy of [a, b] (recent: within ``keep_samples_s``) among ``labels``
        (see :mod:`harness.energy.attribution`); summed over devices. ``idle_around``: the GPU idled
        just before ``a`` and after ``b`` (as around :meth:`measure`'s windows), at the tracked idle."""
        if self.primary.kind != "energy":
            return super().attribute(a, b, labels)
        parts = []
        idle = self.idle.at((a + b) / 2)
        for d, s in enumerate(self.sampler.snapshot(self.primary.name)):
            times = self.snap_to_refreshes(self.primary, s.times) if d == 0 else s.times
            outside = idle[d] if idle_around and math.isfinite(idle[d]) else None
            parts.append(attribute(times, s.values, labels, (a, b), outside))
        names = list(parts[0].energy_j)
        return Attribution({n: sum(p.energy_j[n] for p in parts) for n in names},
                           {n: sum(p.power_w[n] for p in parts) for n in names}, parts[0].seconds,
                           min(p.intervals for p in parts), sum(p.residual_j for p in parts),
                           next((p.reason for p in parts if p.reason), None), max(p.condition for p in parts),
                           None if any(p.energy_sigma_j is None for p in parts) else
                           {n: math.sqrt(sum(p.energy_sigma_j.get(n, 0.0) ** 2 for p in parts))
                            for n in parts[0].energy_sigma_j})

    def describe(self) -> dict:
        devices = self.sources.devices
        sem = self.sources.power.semantics if self.sources.power is not None else None
        counter = self.primary.kind == "energy"
        info = {
            "energy_config": self.cfg.name,
            "energy_source": self.primary.name,
            "energy_estimator": self.estimator,
            "energy_mode": ("counter: one run per prompt with edges on counter refreshes when it spans "
                            f"≥ {self.cfg.counter_min_periods} updates, else repeated" if counter else
                            "polled power: phase-aimed trials, edges integrated over the averaging window")
            if self.cfg.protocol else "one plain window per workload",
            "energy_cross_check": self.cross_check.name if self.cross_check else None,
            "energy_gpus": [d.name for d in devices],
            "energy_architecture": sorted({d.architecture for d in devices}),
            "energy_driver": self.sources.driver,
            "energy_sample_hz": self.cfg.sample_hz,
            "energy_idle_power_w": self.idle_power_w,
            "energy_idle_reason": self.idle_reason,
            "energy_idle_measurements": len(self.idle),
            "energy_power_update_s": sem.update_s if sem else None,
            "energy_power_window_s": sem.window_s if sem else None,
            "energy_power_semantics": sem.note if sem else None,
            "energy_unavailable": dict(self.sources.missing),
            "energy_profile_note": self.profile_note,
            "energy_protocol": self.cfg.protocol,
            "energy_simulated": self.exact is not None,
            **{f"energy_{k}": v for k, v in self.cooldown.items()},
            **(self.host.describe() if self.host is not None else {"host_energy_reason": "energy.host=false"}),
        }
        info.update({f"energy_update_period_s.{name}": p for name, p in self.update_periods.items()})
        if self.cfg.protocol:
            info.update({f"energy_{k}": getattr(self.cfg, k) for k in (
                "counter_min_periods", "min_window_s", "min_repetitions", "trials", "trial_delay_s", "phase_shifts",
                "discard_rise_s", "idle_baseline_s", "idle_every_s")})
        return info

    def close(self) -> None:
        self.sampler.stop()
        self.sources.close()


def _slope(p: tuple[float, float], q: tuple[float, float]) -> float:
    return (q[1] - p[1]) / (q[0] - p[0]) if q[0] > p[0] else NAN


def counter_window_energy(start: dict, end: dict, a: float, b: float) -> tuple[float, float]:
    """Counter energy of a free window [a, b] on one device, and the edges' error scale (J).

    Where the window holds at least two refreshes after ``a`` (and two before ``b``), each edge
    is extrapolated with the power of the counter interval next to it inside the window: exact
    while power is steady over ~one update at the edge, and far better than filling the edges
    with the window's mean (biased when a window opens on a prefill plateau) or interpolating
    across the straddling interval (which mixes in whatever ran before the window). Otherwise
    the counter is interpolated at both ends. Error scale: half the difference between the
    inside and straddling intervals' powers times the edge's length."""
    before_a, after_a = start["around"]
    before_b, after_b = end["around"]
    e_a, e_b = start[COUNTER], end[COUNTER]
    err = 0.0
    if len(after_a) == 2 and after_a[1][0] <= b:
        inside = _slope(after_a[0], after_a[1])
        e_a = after_a[0][1] - inside * (after_a[0][0] - a)
        straddle = _slope(before_a[-1], after_a[0]) if before_a else inside
        err += abs(inside - straddle) / 2 * (after_a[0][0] - a) if math.isfinite(straddle) else 0.0
    if len(before_b) == 2 and before_b[0][0] >= a:
        inside = _slope(before_b[0], before_b[1])
        e_b = before_b[1][1] + inside * (b - before_b[1][0])
        straddle = _slope(before_b[1], after_b[0]) if after_b else inside
        err += abs(inside - straddle) / 2 * (b - before_b[1][0]) if math.isfinite(straddle) else 0.0
    energy = e_b - e_a
    interpolated = (len(after_a) < 2 or after_a[1][0] > b) + (len(before_b) < 2 or before_b[0][0] < a)
    if interpolated and math.isfinite(energy) and b > a:
        # up to half a counter interval at the window's mean power per interpolated edge
        spacing = [q[0] - p[0] for p, q in ((before_a + after_a)[i:i + 2] for i in range(len(before_a + after_a) - 1))]
        err += interpolated * 0.5 * (max(spacing) if spacing else 0.1) * energy / (b - a)
    return energy, err


def cuda_synchronizer(cuda_devices: list[int]) -> Callable[[], None]:
    """Waits for queued work on every device in use (so windows bracket the GPU's real work)."""
    if not cuda_devices:
        return lambda: None
    import torch

    if not torch.cuda.is_available():
        return lambda: None

    def synchronize() -> None:
        for device in cuda_devices:
            torch.cuda.synchronize(device)

    return synchronize


def _simulated_profiles() -> str:
    from harness.resources import conf_dir

    names = sorted(p.stem for p in (conf_dir() / "gpu").glob("sim_*.yaml"))
    return "gpu=" + " | ".join(names) if names else "a conf/gpu profile with a 'simulated' section"


def make_energy_meter(cfg=None, cuda_devices: list[int] | None = None, *, nvml=None, clock=None,
                      synchronize: Callable[[], None] | None = None) -> EnergyMeter:
    """The meter for one cell: ``cfg`` is the ``energy`` config (dict, OmegaConf node or None for
    the protocol defaults); ``cuda_devices`` the CUDA indices the models use. ``nvml``,
    ``clock`` and ``synchronize`` are for tests (simulated NVML, virtual time).

    With ``energy.source=simulated`` the GPUs are simulated from the ``gpu`` profile's
    ``simulated`` section whatever the models run on (a CPU-only run of the whole path)."""
    config = EnergyConfig.from_any(cfg)
    if config.source == "none":
        return NullMeter(f"energy measurement is off (energy={config.name})")
    host = HostEnergy(config.powercap_root) if config.host else None
    profile = config.gpu or {}
    if config.source == "simulated":
        return _simulated_meter(config, profile, list(cuda_devices or []), clock, synchronize, host)
    if profile.get("power_reading") == "none":
        return NullMeter(f"gpu profile '{profile.get('name')}' has no power reading: {profile.get('notes', '')}", host)
    if not cuda_devices:
        return NullMeter("no GPU in use: this cell ran on the CPU (GPU energy not applicable)", host)
    sources = open_sources(list(cuda_devices), config.source, nvml)
    usable = sources.counter if config.source == "counter" else (sources.counter or sources.power)
    if usable is None:
        sources.close()
        missing = "; ".join(f"{k}: {v}" for k, v in sources.missing.items()) or "no source found"
        return NullMeter(f"no usable power source (energy.source={config.source}) for CUDA devices "
                         f"{list(cuda_devices)}: {missing}", host)
    exact = getattr(nvml, "exact_energy", None)
    return GpuEnergyMeter(sources, config, clock, synchronize or cuda_synchronizer(list(cuda_devices)), host=host,
                          exact=exact, exact_net=getattr(nvml, "exact_net_energy", None))


def _simulated_meter(config: EnergyConfig, profile: dict, cuda_devices: list[int], clock, synchronize,
                     host) -> GpuEnergyMeter:
    from harness.energy.simulated import SimulatedWorkloadGPUs

    spec = profile.get("simulated")
    if not spec:
        raise ConfigError(f"energy.source=simulated needs a gpu profile with a 'simulated' section; gpu profile "
                          f"'{profile.get('name')}' has none. Choose {_simulated_profiles()}")
    clock = clock or RealClock()
    try:
        sim = SimulatedWorkloadGPUs(spec, clock)
    except ValueError as e:
        raise ConfigError(f"gpu '{profile.get('name')}': {e}") from e
    sources = open_sources(list(range(len(sim.gpus))), "auto", sim.nvml, by_index=True)
    return GpuEnergyMeter(sources, config, clock, synchronize or cuda_synchronizer(cuda_devices),
                          activity=sim.activity, host=host, exact=sim.nvml.exact_energy,
                          exact_net=sim.nvml.exact_net_energy)
