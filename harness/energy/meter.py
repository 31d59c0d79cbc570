"""Energy meters: the seam the runner uses.

``meter.measure(label, workload)`` runs the workload (once, or repeated where the source needs
it) and returns one :class:`Measurement`: the results of the measured runs and one
:class:`EnergyReading` for them. ``start_window(label)`` / ``stop_window(handle)`` bracket any
region (windows may nest and overlap; a window holds a few cumulative values, never the samples
in it). Every window opens and closes after a device synchronise.

:class:`GpuEnergyMeter` picks the protocol for its primary source — :mod:`.counter` (NVML energy
counter), :mod:`.polled` (polled power only), :mod:`.plain` (``energy.protocol=false`` and free
windows) — over the state it keeps through the cell (:mod:`.state`). Every meter also records host
energy (CPU package, DRAM) from RAPL where the machine exposes it (:mod:`.host`).
"""
from __future__ import annotations

import abc
import time
from dataclasses import dataclass, field
from typing import Callable, Generic, TypeVar

from harness.energy import counter, plain, polled, selfcheck
from harness.energy.attribution import Attribution, split_counter
from harness.energy.config import EnergyConfig
from harness.energy.gpustate import gpu_state, summarize_state
from harness.energy.host import HostEnergy
from harness.energy.readout import host_fields
from harness.energy.reading import NAN, EnergyReading
from harness.energy.sources import Sources
from harness.energy.state import MeterState
from harness.energy.windows import Window

T = TypeVar("T")


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


class EnergyMeter(abc.ABC):
    """``measure`` runs ``workload`` (possibly several times, as the source requires) and returns
    the result of every measured run with one reading for them; windows bracket any region."""

    @abc.abstractmethod
    def measure(self, label: str, workload: Callable[[], T]) -> Measurement[T]: ...

    @abc.abstractmethod
    def start_window(self, label: str) -> Window: ...

    @abc.abstractmethod
    def stop_window(self, handle: Window) -> EnergyReading: ...

    @abc.abstractmethod
    def describe(self) -> dict:
        """What the meter is and knows (``energy_meter`` in a cell's summary)."""

    @abc.abstractmethod
    def gpu_state(self) -> dict:
        """The ``gpu_state`` summary of the cell so far (state at start, now, flags)."""

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


class NullMeter(EnergyMeter):
    """No GPU power source: run the workload once; GPU energy is NaN with the reason; time (and
    host energy, where RAPL is readable) is still taken."""

    def __init__(self, reason: str, host: HostEnergy | None = None):
        self.reason, self.host = reason, host

    def _host(self) -> dict | None:
        return self.host.read() if self.host is not None and self.host.available else None

    def measure(self, label, workload):
        window = self.start_window(label)
        result = workload()
        reading = self.stop_window(window)
        return Measurement([result], reading, [(window.start, window.start + reading.duration_s)])

    def start_window(self, label: str) -> Window:
        return Window(label, time.perf_counter(), host=self._host())

    def stop_window(self, handle: Window) -> EnergyReading:
        seconds = time.perf_counter() - handle.start
        return EnergyReading(duration_s=seconds, measured_s=seconds, label=handle.label, reason=self.reason,
                             **host_fields(self.host, handle.host, self._host()))

    def describe(self) -> dict:
        return {"energy_source": "none", "energy_reason": self.reason,
                **(self.host.describe() if self.host is not None else {})}

    def gpu_state(self) -> dict:
        return summarize_state(None, None, self.reason)


class GpuEnergyMeter(EnergyMeter):
    """Meters the GPUs behind ``sources`` with the protocol their primary source needs.

    ``activity`` (a context-manager factory) wraps each run of a workload — the simulated source
    uses it to draw power while the decoder runs; ``exact`` / ``exact_net`` give a simulator's true
    energy over an interval, recorded beside the estimate."""

    def __init__(self, sources: Sources, cfg: EnergyConfig, clock=None, synchronize: Callable[[], None] | None = None,
                 *, activity: Callable | None = None, host: HostEnergy | None = None,
                 exact: Callable[[float, float], float] | None = None,
                 exact_net: Callable[[float, float], float] | None = None):
        self.state = MeterState(sources, cfg, clock, synchronize, activity=activity, host=host, exact=exact,
                                exact_net=exact_net)
        self.cfg, self.sources = cfg, sources
        self.primary, self.sampler = self.state.primary, self.state.sampler
        self.protocol = (plain if not cfg.protocol else counter if self.primary.kind == "energy" else polled)
        self.state.start()
        self.check = selfcheck.needed(self.state)  # a polled reading without a sensor profile: measured at start

    def measure(self, label, workload) -> Measurement:
        if self.check.pending and self.protocol is polled:
            selfcheck.run(self.state, self.check, workload)
            self.state.window_check = self.check if self.check.refining else None
        if self.protocol is plain:
            window = self.start_window(label)
            _, result, end, _ = self.state.run_once(workload)
            return Measurement([result], self.stop_window(window), [(window.start, end)])
        results, reading, trials = self.protocol.run(self.state, label, workload)
        return Measurement(results, reading, [(t.a, t.b) for t in trials])

    def start_window(self, label: str) -> Window:
        self.state.synchronize()
        t = self.state.clock.now()
        return Window(label, t, self.sampler.anchor(t), self.state.host_read())

    def stop_window(self, handle: Window) -> EnergyReading:
        self.state.synchronize()
        end = self.state.clock.now()
        host_end = self.state.host_read()
        self.state.await_settled(end)
        reading = plain.window_reading(self.state, handle, end, host_end)
        self.sampler.release(handle.anchor)
        return reading

    def gpu_state(self) -> dict:
        nvml = self.sources.nvml
        if nvml is None:
            return summarize_state(None, None, "no NVML")
        return summarize_state(self.state.state_start, gpu_state(nvml, self.sources.devices))

    def attribute(self, a: float, b: float, labels: dict[str, list[tuple[float, float]]],
                  idle_around: bool = True) -> Attribution:
        """Split the counter energy of [a, b] (recent: within ``keep_samples_s``) among ``labels``
        (:func:`harness.energy.attribution.split_counter`)."""
        if self.primary.kind != "energy":
            return super().attribute(a, b, labels)
        return split_counter(self.state, a, b, labels, idle_around)

    def describe(self) -> dict:
        from harness.energy.describe import describe_meter

        return {**describe_meter(self.state), "energy_selfcheck": self.check.describe()}

    def close(self) -> None:
        self.state.close()
