"""The state a GPU meter keeps through a cell, shared by the protocols (:mod:`.counter`,
:mod:`.polled`, :mod:`.plain`): the sources and which one is primary, the sampler thread, what is
known about each sensor (:mod:`.sensors`), idle power (:mod:`.idle`), the GPU's state sampled
during the cell (:class:`~harness.energy.gpustate.StateWatch`) and host energy; and the few
operations every protocol needs — run the workload once, watch a sensor's refreshes, wait until the
readings around an instant are final, measure idle, and say what went wrong in a span of time
(a lost source, polls that failed, a counter that went backwards).

Start-up (:meth:`MeterState.start`): the sampler starts; every source is characterised by fast
polling (update period, refresh jitter, counter resolution); the meter then waits until the GPU
has been idle ``idle_settle_s`` (it usually just loaded a model or warmed up: P-state hysteresis)
and measures the settled idle baseline.
"""
from __future__ import annotations

import contextlib
import math
import random
from typing import Callable

from harness.energy import idlesteps, profiles
from harness.energy.config import EnergyConfig
from harness.energy.gpustate import StateWatch, cool_down, gpu_state
from harness.energy.hardware import UNKNOWN, apply_profile, power_semantics
from harness.energy.host import HostEnergy
from harness.energy.idle import IdleTracker
from harness.energy.phases import Refresh, RefreshWatcher
from harness.energy.sampler import Anchor, RealClock, Sampler
from harness.energy.sensors import Sensor, characterize
from harness.energy.series import HOLD
from harness.energy.sources import Channel, Sources

NAN = math.nan


def apply_gpu_profile(sources: Sources, profile: dict | None) -> str | None:
    """Use the ``gpu`` profile's power figures if it matches the GPUs in use; a note if it does not."""
    profile, power = profile or {}, sources.power
    names = [d.name for d in sources.devices]
    match = profile.get("match") or []
    if match and names and not all(any(m.lower() in n.lower() for m in match) for n in names):
        return f"gpu profile '{profile.get('name')}' (matches {match}) does not fit {names}; using detected figures"
    if power is not None:
        if power.semantics == UNKNOWN and profile.get("architecture"):
            power.semantics = power_semantics(profile["architecture"], names[0] if names else "", power.reading)
        power.semantics = apply_profile(power.semantics, profile)
    return None


class MeterState:
    """Everything a GPU meter knows during a cell (see the module docstring)."""

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
        self.profile_notes = profiles.apply(sources)
        self.profile_note = apply_gpu_profile(sources, cfg.gpu)
        use_counter = cfg.source in ("auto", "counter", "simulated") and sources.counter is not None
        self.primary: Channel = sources.counter if use_counter else sources.power
        self.cross: Channel | None = sources.power if self.primary is sources.counter else None
        self.channels = [c for c in (self.primary, self.cross) if c is not None]
        self.devices = len(self.primary.handles)
        self.sensors = {c.name: Sensor(c.name, c.kind, c.semantics.update_s if c.semantics else None)
                        for c in self.channels}
        for c in self.channels:  # a lag measured by harness-gpu-check (sensor profile): where the tests start
            lag = c.semantics.lag_s if c.semantics is not None else None
            if c.kind == "energy" and lag is not None:
                self.sensors[c.name].seed_lag(lag)
        self._device_sensors: dict[str, dict[int, Sensor]] = {}
        self.idle = IdleTracker(self.devices)
        self.idle.settle_s = cfg.idle_settle_s
        self.idle_power_w, self.idle_reason = NAN, None
        self.mean_power_w = NAN  # of the last measured window (a first guess for the next)
        self.window_check = None  # a selfcheck.SelfCheck narrowing a bracketed window from the trials' edges
        self.cross_idle_ratio = NAN  # cross-check reading ÷ primary at the settled idle baseline
        self.cooldown: dict = {}
        self.state_start = None
        self.watch: StateWatch | None = None
        self.sampler = Sampler(self.channels, self.clock, cfg.interval_s, cfg.skip_unchanged, cfg.align_timestamps,
                               keep_s=cfg.keep_samples_s, max_gap_s=cfg.max_gap_s)

    # ---- start-up ---------------------------------------------------------------------------
    def start(self) -> None:
        cfg, nvml = self.cfg, self.sources.nvml
        if cfg.cooldown_s > 0:
            self.cooldown = self._cool_down()
        if nvml is not None:
            self.state_start = gpu_state(nvml, self.sources.devices)
            self.watch = StateWatch(nvml, [d.handle for d in self.sources.devices], self.clock, cfg.state_every_s)
            self.sampler.extra.append(self.watch.tick)
        if self.host is not None and self.host.available:
            self._host_due = -math.inf
            self.sampler.extra.append(self._host_tick)
        self.sampler.start()
        started = self.clock.now()
        if cfg.infer_update_period_s > 0:
            characterize(self.channels, self.clock, cfg.infer_update_period_s, poll_s=cfg.phase_poll_s,
                         sensors=self.sensors)
        for channel in self.channels:
            self.sampler.set_update_period(channel.name, self.update_period(channel))
            self._share_grid(channel)
        self.idle_power_w, self.idle_reason = self._baseline(started)

    def _host_tick(self) -> None:
        """Read RAPL about once a second from the sampler thread, so counter wraps are never missed."""
        now = self.clock.now()
        if now >= self._host_due:
            self._host_due = now + 1.0
            self.host.read()

    def _cool_down(self) -> dict:
        nvml, handles = self.sources.nvml, [d.handle for d in self.sources.devices]
        if nvml is None:
            return {"cooldown_reason": "no NVML: no temperature to wait on"}
        last: list = []

        def read_power() -> float:
            if self.sources.power is not None:
                return sum(self.sources.power.read())
            now, joules = self.clock.now(), sum(self.primary.read())
            watts = (joules - last[1]) / (now - last[0]) if last and now > last[0] else 0.0
            last[:] = [now, joules]
            return watts

        cfg = self.cfg
        return cool_down(lambda: sum(nvml.nvmlDeviceGetTemperature(h, nvml.NVML_TEMPERATURE_GPU) for h in handles),
                         read_power, self.clock, cfg.cooldown_s, cfg.cooldown_window_s, cfg.cooldown_temperature_c,
                         cfg.cooldown_power)

    def _baseline(self, started: float) -> tuple[float, str | None]:
        """Idle at start-up, measured for ``idle_baseline_s`` once the GPU has been idle ``idle_settle_s``."""
        cfg = self.cfg
        if cfg.idle_baseline_s <= 0:
            return NAN, "no idle baseline at start (energy.idle_baseline_s=0); idle is measured after each window"
        begin = max(started + cfg.idle_settle_s, self.clock.now())
        period = self.update_period(self.idle_channel)
        # ≥ 3 adjacent intervals, each an update or an averaging window long (the longer: readings one window
        # apart share no averaging — a 1 s power.draw needs 4.5 s, or the idle's movement is never measured)
        interval = max(period if math.isfinite(period) else 0.0, self.power_window(self.idle_channel) or 0.0)
        span = max(cfg.idle_baseline_s, 4.5 * interval)
        self.clock.sleep(begin - self.clock.now())
        channel = self.idle_channel
        watcher = self.watcher(channel)  # every refresh to ± 0.5 ms: how the idle moves between intervals
        while self.clock.now() < begin + span and watcher.step():
            pass
        self.clock.sleep(begin + span - self.clock.now())
        end = self.clock.now()
        self.await_settled(end)
        idlesteps.from_baseline(self, channel, watcher.seen, begin, end)
        begin += self.power_window(channel) or 0.0
        watts = self.device_powers(channel, begin, end)
        failure = self.sampler.failure(channel.name, end)
        if failure is not None or not all(math.isfinite(w) for w in watts):
            return NAN, failure or f"{channel.name} gave too few readings in the idle baseline"
        if self.cross is not None and channel is not self.cross:  # the second opinion at settled idle
            cross = sum(self.device_powers(self.cross, begin + (self.power_window(self.cross) or 0.0), end))
            self.cross_idle_ratio = cross / sum(watts) if sum(watts) > 0 and math.isfinite(cross) else NAN
        if cfg.idle_settle_s > 0:
            self.idle.add_settled((begin + end) / 2, watts)
        else:
            self.idle.add_post((begin + end) / 2, watts)
        return sum(watts), None

    # ---- what the sensors mean --------------------------------------------------------------
    def update_period(self, channel: Channel, device: int | None = None) -> float:
        """Device 0's update period (the timing reference), ``device``'s, or (``device=-1``) the longest."""
        sensor = self.sensors[channel.name]
        if device is None or not sensor.device_update_s:
            return sensor.update_period()
        periods = [p if math.isfinite(p) else sensor.update_period() for p in sensor.device_update_s]
        return max(periods) if device == -1 else periods[min(device, len(periods) - 1)]

    def device_sensor(self, channel: Channel, device: int) -> Sensor:
        """The sensor of ``channel`` on ``device`` (its own lag tests; device 0's is ``sensors[name]``)."""
        if device == 0:
            return self.sensors[channel.name]
        per = self._device_sensors.setdefault(channel.name, {})
        if device not in per:
            base = self.sensors[channel.name]
            per[device] = Sensor(channel.name, channel.kind, self.update_period(channel, device),
                                 resolution_j=base.resolution_j, resolution_note=base.resolution_note)
            lag = channel.per_device[device].lag_s if len(channel.per_device) > device else None
            if lag is not None:
                per[device].seed_lag(lag)
        return per[device]

    @staticmethod
    def power_window(channel: Channel) -> float | None:
        """Averaging window of a power reading (None: not known)."""
        return channel.semantics.window_s if channel.kind == "power" and channel.semantics is not None else None

    def note(self, channel: Channel, seen: list[list[Refresh]]) -> None:
        self.sensors[channel.name].note(seen[0] if seen else [])
        self._share_grid(channel)

    def _share_grid(self, channel: Channel) -> None:
        """Give the sampler device 0's refresh grid once it is well fitted (regular refreshes)."""
        grid = self.sensors[channel.name].grid()
        if grid.points >= 8 and math.isfinite(grid.t_ref) and grid.jitter < self.cfg.interval_s / 8 and \
                grid.ref_sigma < self.cfg.interval_s / 8:
            self.sampler.set_grid(channel.name, grid.t_ref, grid.period)

    def spacing(self, channel: Channel, first: Refresh, second: Refresh) -> float:
        """Time between two refreshes: on the fitted grid where that agrees with the observed times
        (a counter on a regular grid: ± µs instead of ± a millisecond poll), else as observed."""
        observed = second.t - first.t
        grid = self.sensors[channel.name].grid()
        if grid.points >= 4 and grid.sigma < 1e-4 and grid.jitter < 2e-4:
            n = round(observed / grid.period)
            if n >= 1 and abs(n * grid.period - observed) <= first.halfwidth + second.halfwidth + n * grid.sigma:
                return n * grid.period
        return observed

    def power_limit_w(self) -> float:
        """Sum of the GPUs' enforced power limits (W), NaN where NVML does not say."""
        limits = [d.get("power_limit_w") for d in (self.state_start or [])]
        return sum(limits) if limits and all(x is not None for x in limits) else NAN

    # ---- running and waiting ----------------------------------------------------------------
    def run_once(self, workload: Callable, anchor: bool = False):
        """Run ``workload`` once (inside ``activity``), synchronise; (start, result, end, anchor) —
        the anchor at ``start`` registered before the run, so the readings around it are kept."""
        start = self.clock.now()
        handle = self.sampler.anchor(start) if anchor else None
        if self.watch is not None:
            self.watch.tick(now_with_processes=True)  # the state at the start of every run, however short
        with self.activity():
            result = workload()
        self.synchronize()
        return start, result, self.clock.now(), handle

    def host_read(self) -> dict | None:
        return self.host.read() if self.host is not None and self.host.available else None

    def watcher(self, channel: Channel) -> RefreshWatcher:
        """A 1 ms refresh watcher on ``channel`` whose failed reads count in the readings they touch."""
        log = self.sampler.gaps[channel.name]

        def failed(t: float, message: str) -> None:
            with self.sampler.lock:
                log.note(t, message)

        return RefreshWatcher(channel, self.clock, self.cfg.phase_poll_s, self.cfg.max_gap_s, failed)

    def await_settled(self, t: float, channels: list[Channel] | None = None) -> None:
        """Wait (at most about two update periods) until the readings around ``t`` are final."""
        if self.cfg.integration == "sum" and not self.cfg.protocol:
            return
        channels = channels or self.channels
        periods = [self.update_period(c) for c in channels]
        longest = max((p for p in periods if math.isfinite(p)), default=0.1)
        deadline = (self.clock.now() + 2 * longest + 3 * self.cfg.interval_s
                    + (self.power_window(self.primary) or 0) / 2)
        names = [c.name for c in channels]
        while not self.sampler.settled(t, names) and self.clock.now() < deadline:
            self.clock.sleep(self.cfg.interval_s)

    def values(self, where: Anchor | float, channel: Channel) -> list[dict]:
        return self.sampler.values(where)[channel.name]["series"]

    # ---- idle ---------------------------------------------------------------------------------
    def post_idle_due(self) -> bool:
        every = self.cfg.idle_every_s
        return every is not None and self.clock.now() - self.idle.last_post >= every

    def settled_due(self) -> bool:
        cfg = self.cfg
        if cfg.idle_settle_s <= 0 or cfg.idle_every_s is None:
            return False
        return not self.idle.offsets or self.clock.now() - self.idle.last_settled >= cfg.idle_settled_every_s

    def device_powers(self, channel: Channel, a: float, b: float) -> list[float]:
        """Mean power per device over [a, b] from retained readings (counter: slope between the
        first and last refreshes inside; power: held readings)."""
        out = []
        for s in self.sampler.snapshot(channel.name):
            if channel.kind == "energy":
                inside = [(t, v) for t, v in zip(s.times, s.values) if a <= t <= b]
                ok = len(inside) >= 2 and inside[-1][0] > inside[0][0] and inside[-1][1] >= inside[0][1]
                out.append((inside[-1][1] - inside[0][1]) / (inside[-1][0] - inside[0][0]) if ok else NAN)
            else:
                out.append(s.energy(a, b, HOLD) / (b - a) if b > a and s.times else NAN)
        return out

    def coarse(self) -> bool:
        """Whether the primary is a counter whose steps are large next to the idle energy of one update
        (its interval powers are then meaningless: idle is taken from the power reading instead)."""
        sensor, period = self.sensors[self.primary.name], self.update_period(self.primary)
        q = sensor.resolution_j
        idle = self.idle_power_w if math.isfinite(self.idle_power_w) else 30.0 * self.devices
        return self.primary.kind == "energy" and math.isfinite(q) and math.isfinite(period) and \
            q > 0.05 * idle * period / self.devices

    @property
    def idle_channel(self) -> Channel:
        return self.cross if self.cross is not None and self.coarse() else self.primary

    def readings_after(self, channel: Channel, since: float) -> list[float]:
        """Mean power per device of the readings whose averaging window lies wholly after ``since``
        (a power channel; NaN for a device without one)."""
        window = self.power_window(channel) or 0.0
        out = []
        for s in self.sampler.snapshot(channel.name):
            values = [v for t, v in zip(s.times, s.values) if t - window >= since]
            out.append(sum(values) / len(values) if values else NAN)
        return out

    def settle_idle(self, work_end: float, wait: bool = False) -> None:
        """Wait until the GPU has been idle ``idle_settle_s`` since ``work_end`` and its idle stopped
        falling, then measure the settled idle (over ≥ 0.5 s or three updates) — unless (not ``wait``: the caller
        watched into the wait) the idle just measured after work is at the settled level
        (:meth:`.IdleTracker.at_settled`), then taken as settled."""
        cfg, channel, idle = self.cfg, self.idle_channel, self.idle
        if not wait and len(idle.post) and self.clock.now() - idle.post.times[-1] < 1.0 and \
                idle.at_settled(idle.post.watts[-1]):
            idle.add_settled(self.clock.now(), idle.post.watts[-1])
            return
        period = self.update_period(channel)
        span = max(0.5, 3 * period if math.isfinite(period) else 0.3)
        begin = max(work_end + cfg.idle_settle_s, self.clock.now())
        last = NAN
        while True:
            self.clock.sleep(begin + span - self.clock.now())
            self.await_settled(self.clock.now(), [channel])
            watts = self.device_powers(channel, begin + (self.power_window(channel) or 0.0), self.clock.now())
            total = sum(watts)
            falling = math.isfinite(last) and last - total > 0.02 * total
            if not math.isfinite(total) or not falling or self.clock.now() - work_end > 3 * cfg.idle_settle_s + span:
                break
            last, begin = total, self.clock.now()
        self.idle.add_settled((begin + self.clock.now()) / 2, watts)

    # ---- what went wrong in a span ---------------------------------------------------------------
    def trouble(self, channel: Channel, a: float, b: float, hidden_ok: bool = True) -> tuple[str | None, int]:
        """(why a reading over [a, b] from ``channel`` cannot be trusted, or None; failed reads in it).
        A lost source, or a counter that went backwards, always; failed polls only where they hid a
        sensor refresh and ``hidden_ok`` is False (power readings integrated over the span)."""
        lost = self.sampler.failure(channel.name, b)
        count, longest, hidden, message = self.sampler.glitches(channel.name, a, b)
        if lost is not None:
            return lost, count
        back = self.sampler.backwards_between(channel.name, a, b)
        if back:
            t, old, new = back[0]
            return (f"{channel.name} went backwards at t={t:.3f} s ({old:.3f} J → {new:.3f} J): counter reset or "
                    "wrap; energy across it is unknown"), count
        if not hidden_ok and hidden >= 0.5:
            return (f"{channel.name}: {count} failed poll(s) ({message}) left {longest * 1e3:.0f} ms unseen, "
                    f"{hidden:.1f} sensor refresh(es) hidden"), count
        return None, count

    def flags(self, spans: list[tuple[float, float]]) -> dict:
        """GPU state seen while ``spans`` ran (throttling, other processes): record fields."""
        if self.watch is None:
            return {}
        seen = [self.watch.between(a, b) for a, b in spans]
        reasons = sorted({r for s in seen for r in (s["throttle_reasons"] or "").split(",") if r})
        pids = sorted({p for s in seen for p in (s["other_pids"] or "").split(",") if p}, key=int)
        return {"throttled": bool(reasons), "throttle_reasons": ",".join(reasons) or None, "shared": bool(pids),
                "other_pids": ",".join(pids) or None}

    def semantics_line(self, channel: Channel) -> str:
        """What ``channel``'s figures in use are and where each comes from (measured here, a sensor
        profile, documented or assumed)."""
        sem, sensor = channel.semantics, self.sensors[channel.name]
        ms = lambda x: "unknown" if x is None or not math.isfinite(x) else f"{x * 1e3:.0f} ms"  # noqa: E731
        update = (f"update {ms(sensor.inferred_update_s)} (measured at start)" if math.isfinite(sensor.inferred_update_s)
                  else f"update {ms(self.update_period(channel))}")
        window = f", window {ms(sem.window_s)}" if channel.kind == "power" and sem is not None else ""
        lag_text = f", lag {ms(sem.lag_s if sem is not None else None)}"
        if channel.kind == "energy" and sensor.lag_tests:
            hi = f"{sensor.lag_hi * 1e3:.0f} ms" if math.isfinite(sensor.lag_hi) else "?"
            lag_text = f", lag {sensor.lag_lo * 1e3:.0f}..{hi} (bracketed on the meter's windows)"
        elif channel.kind == "energy" and self.coarse() and sem is not None and sem.lag_s is None:
            lag_text = ", lag hidden by the counter's steps: up to one update assumed (harness-gpu-check measures it)"
        return f"{channel.name}: {update}{window}{lag_text}; {sem.provenance if sem is not None else 'nothing known'}"

    def sensor_fields(self) -> dict:
        counter = self.sensors.get(self.primary.name)
        out = {"refresh_jitter_s": counter.jitter() if counter else NAN,
               "sensor_semantics": " | ".join(self.semantics_line(c) for c in self.channels)}
        if self.primary.kind == "energy":
            lags = [self.device_sensor(self.primary, d).lag_reported() for d in range(self.devices)]
            out.update({"counter_resolution_j": counter.resolution_j,
                        "counter_lag_s": max(lags) if all(math.isfinite(x) for x in lags) else NAN})
        return out

    def close(self) -> None:
        self.sampler.stop()
        self.sources.close()

