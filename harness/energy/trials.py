"""A trial of a measurement: one window [a, b] holding one or more back-to-back runs of the
workload, and what the protocols know about its edges (:mod:`.counter`, :mod:`.polled`)."""
from __future__ import annotations

import math
from dataclasses import dataclass, field
from typing import Callable

from harness.energy.phases import Refresh
from harness.energy.sampler import Anchor

NAN = math.nan


@dataclass
class Trial:
    """One trial: its window [a, b], the runs it holds, and what is known about its edges."""

    opened: float
    watched_from: float = NAN  # when the meter began watching for this trial (its failed reads count from here)
    a: float = NAN
    b: float = NAN
    runs: int = 0
    durations: list[float] = field(default_factory=list)        # each kept run's seconds
    lead: list[Refresh | None] = field(default_factory=list)    # counter refresh just before ``a`` (idle between)
    lead_rate: list[float] = field(default_factory=list)        # counter: idle power there, per device (W)
    lead_sigma: list[float] = field(default_factory=list)       # ± W
    tail: list[Refresh | None] = field(default_factory=list)    # first counter refresh caught up with ``b``
    tail_rate: list[float] = field(default_factory=list)
    tail_sigma: list[float] = field(default_factory=list)
    lead_own: list[float] = field(default_factory=list)         # counter: those rates' own noise alone (± W)
    tail_own: list[float] = field(default_factory=list)
    residue: list[float] = field(default_factory=list)     # counter: work energy a tail's lag test could miss (J)
    aligned: bool = False      # ``a`` is the first run's start, right after ``lead``
    aimed: bool = False        # polled: opened at a phase aimed from observed refreshes
    stratum: int = -1          # polled: the index of the phase it was aimed at (of the round's evenly spaced ones)
    anchor_a: Anchor | None = None
    anchor_b: Anchor | None = None
    ext_b: float = NAN         # polled: end of the edge-exact integration
    tail_range: float = 0.0    # polled: range of the readings of the idle after it (W, devices summed)
    anchor_ext: Anchor | None = None
    tail_seen: list[list[Refresh]] = field(default_factory=list)  # polled: each device's refreshes in the tail
    idle_edges: list[float] = field(default_factory=list)  # polled: idle right before and after it (W; .trialidle)
    host_a: dict | None = None
    host_b: dict | None = None

    @property
    def seconds(self) -> float:
        return self.b - self.a


class Runs:
    """Runs of the workload in one trial, back to back; which are kept."""

    def __init__(self, state, trial: Trial, workload: Callable, results: list):
        self.state, self.trial, self.workload, self.results = state, trial, workload, results
        self.kept: list[tuple[float, float]] = []
        self.first = True

    def run(self, keep_all: bool = False) -> tuple[float, float]:
        host = self.state.host_read()
        start, result, end, anchor = self.state.run_once(self.workload, anchor=True)
        if keep_all or start - self.trial.opened >= self.state.cfg.discard_rise_s:
            if not self.kept:
                self.trial.aligned = self.first
                self.trial.a = start
                self.trial.anchor_a = anchor
                self.trial.host_a = host
                anchor = None
            self.kept.append((start, end))
            self.results.append(result)
        if anchor is not None:
            self.state.sampler.release(anchor)
        self.first = False
        return start, end

    def drop(self) -> None:
        """Forget the kept runs (they were in the power rise, or touched by a glitch)."""
        del self.results[len(self.results) - len(self.kept):]
        self.kept.clear()
        if self.trial.anchor_a is not None:
            self.state.sampler.release(self.trial.anchor_a)
            self.trial.anchor_a = None

    def enough(self) -> bool:
        cfg = self.state.cfg
        return bool(self.kept) and (sum(b - a for a, b in self.kept) >= cfg.min_window_s - 1e-9
                                    or len(self.kept) >= cfg.min_repetitions)

    def close(self) -> None:
        trial, state = self.trial, self.state
        trial.b = self.kept[-1][1]
        trial.runs = len(self.kept)
        trial.durations = [b - a for a, b in self.kept]
        trial.host_b = state.host_read()
        trial.anchor_b = state.sampler.anchor(trial.b)


def release(sampler, trials: list[Trial]) -> None:
    for t in trials:
        for anchor in (t.anchor_a, t.anchor_b, t.anchor_ext):
            if anchor is not None:
                sampler.release(anchor)
