"""GPU energy measurement without a GPU: a simulated NVML over a known power waveform
(readings are 25 ms averages refreshed every 100 ms, as on A100/H100; the energy counter
has its own period), mostly in virtual time so the tests are fast."""
from __future__ import annotations

import math
import os
import random
import statistics
import threading
import time

import pytest
from omegaconf import OmegaConf

from harness.energy import EnergyReading, GpuEnergyMeter, NullMeter, make_energy_meter, polled, summarize_records
from harness.energy.sampler import RealClock, Sampler
from harness.energy.simloads import llm_like_load
from harness.energy.simulated import SimClock, SimGPU, SimulatedNVML
from harness.energy.sources import Channel, open_sources
from harness.energy.windows import counter_energy, sample_sum_energy, trapezoid_energy, with_hold_points

CONF = os.path.join(os.path.dirname(__file__), "..", "..", "conf")
NAIVE = OmegaConf.to_container(OmegaConf.load(os.path.join(CONF, "energy", "naive.yaml")))
NAIVE.pop("defaults")  # the preset extends EnergyConfig (energy/protocol in the ConfigStore)
NAIVE["gpu"] = None
FAST = {"idle_baseline_s": 0.0, "infer_update_period_s": 0.3}  # protocol defaults otherwise


def sim(seed: int = 0, **gpu_kwargs):
    clock = SimClock(1000.0 + 0.0137 * seed)
    gpu_kwargs.setdefault("power_phase_s", random.Random(seed).uniform(0, 0.1))
    gpu = SimGPU(clock, **gpu_kwargs)
    return clock, gpu, SimulatedNVML([gpu], clock)


def relative_error(cfg: dict, seed: int, run_s: float, runs_per_workload: int = 1) -> float:
    """(estimate − truth) / truth of one meter on one bursty scenario."""
    clock, gpu, nvml = sim(seed)
    rng = random.Random(seed)
    meter = make_energy_meter(cfg, [0], nvml=nvml, clock=clock)
    clock.sleep(rng.uniform(0, 1))
    m = meter.measure("prompt", lambda: sum(gpu.run(llm_like_load(rng, run_s)) for _ in range(runs_per_workload)))
    results, reading = m.results, m.reading
    meter.close()
    return (reading.energy_all_runs_j - sum(results)) / sum(results)


# ---- accuracy: protocol vs the seeds' naive 1 Hz sum -------------------------------------------------

@pytest.mark.parametrize("run_s", [0.37, 6.0])
def test_protocol_within_2_percent_and_naive_sum_much_worse(run_s):
    seeds = range(16)
    counter = [relative_error({**FAST}, s, run_s) for s in seeds]
    polled = [relative_error({**FAST, "source": "power"}, s, run_s) for s in seeds]
    # the seeds measure one long window: as many back-to-back runs as fill >= 5 s, 1 Hz samples summed
    naive = [relative_error(NAIVE, s, run_s, runs_per_workload=max(1, math.ceil(5.0 / run_s))) for s in seeds]
    mae = {name: statistics.mean(abs(e) for e in errs) for name, errs in
           (("protocol/counter", counter), ("protocol/polled power", polled), ("naive 1 Hz sum", naive))}
    worst = {"protocol/counter": max(map(abs, counter)), "protocol/polled power": max(map(abs, polled)),
             "naive 1 Hz sum": max(map(abs, naive))}
    print(f"\nruns of {run_s} s, {len(seeds)} bursty scenarios — mean |error| / worst |error|:")
    for name in mae:
        print(f"  {name:22s} {100 * mae[name]:6.2f} % / {100 * worst[name]:6.2f} %")
    assert worst["protocol/counter"] < 0.02
    assert mae["protocol/polled power"] < 0.01
    assert sum(abs(e) < 0.02 for e in polled) >= 0.85 * len(polled)  # part-time readings: a sampling error remains
    assert mae["naive 1 Hz sum"] > 3 * mae["protocol/polled power"]
    assert worst["naive 1 Hz sum"] > 0.05


def test_phase_shifting_undoes_a_workload_locked_to_the_sensor():
    """A 100 ms-periodic load (75 ms at 400 W, 25 ms at 100 W) locked to the 100 ms refresh: four
    trials opened at quarter-period phases see the whole period; unshifted trials do not."""
    def error(phase_shifts: int, seed: int) -> float:
        clock, gpu, nvml = sim(seed, ripple_w=0.0)
        cfg = {**FAST, "source": "power", "phase_shifts": phase_shifts, "trial_delay_s": [0.2, 0.2]}
        meter = make_energy_meter(cfg, [0], nvml=nvml, clock=clock)
        m = meter.measure("locked", lambda: gpu.run([(0.075, 400.0), (0.025, 100.0)] * 10))
        results, reading = m.results, m.reading
        meter.close()
        return (reading.energy_all_runs_j - sum(results)) / sum(results)

    shifted = [abs(error(8, s)) for s in range(6)]
    unshifted = [abs(error(1, s)) for s in range(6)]
    print(f"\nphase-locked load: |error| with phase shifts {100 * max(shifted):.2f} % (worst), "
          f"without {100 * statistics.mean(unshifted):.2f} % (mean)")
    assert max(shifted) < 0.01
    assert statistics.mean(unshifted) > 5 * max(shifted)


# ---- windows and the energy counter -----------------------------------------------------------------

def test_counter_windows_exact_to_counter_resolution():
    clock, gpu, nvml = sim(ripple_w=0.0)
    meter = make_energy_meter({**FAST, "source": "counter"}, [0], nvml=nvml, clock=clock)
    gpu.run([(0.5, 120.0), (1.0, 400.0)])
    gpu.hold(300.0)
    clock.sleep(0.237)
    outer = meter.start_window("outer")
    clock.sleep(1.111)
    inner = meter.start_window("inner")
    clock.sleep(2.222)
    inner_reading = meter.stop_window(inner)  # nested window
    overlap = meter.start_window("overlap")
    clock.sleep(0.777)
    outer_reading = meter.stop_window(outer)
    clock.sleep(0.5)
    overlap_reading = meter.stop_window(overlap)  # overlaps outer's end
    for reading in (inner_reading, outer_reading, overlap_reading):
        assert reading.source == "nvml-counter" and reading.reason is None
        assert abs(reading.energy_per_run_j - 300.0 * reading.duration_s) <= 0.002  # 1 mJ counter steps at each end
        assert reading.coverage == 1.0
    meter.close()


def test_counter_window_over_varying_load_is_within_one_update_of_truth():
    clock, gpu, nvml = sim(3)
    meter = make_energy_meter({**FAST, "source": "counter", "protocol": False}, [0], nvml=nvml, clock=clock)
    rng = random.Random(3)
    m = meter.measure("one run", lambda: gpu.run(llm_like_load(rng, 3.0)))
    results, reading = m.results, m.reading
    bound = 2 * 0.1 * 450.0  # at most one 100 ms update at each end, at the highest power
    assert abs(reading.energy_per_run_j - results[0]) < bound
    assert abs(reading.energy_per_run_j - results[0]) / results[0] < 0.01
    meter.close()


def test_estimators_on_known_series():
    times, watts = [0.0, 1.0, 2.0, 3.0], [100.0, 200.0, 200.0, 100.0]
    assert trapezoid_energy(times, watts, 0.0, 3.0) == pytest.approx(150 + 200 + 150)
    assert trapezoid_energy(times, watts, 1.0, 2.0) == pytest.approx(200.0)
    assert trapezoid_energy(times, watts, 1.5, 1.7) == pytest.approx(40.0)  # no reading inside: interpolated
    assert sample_sum_energy(times, watts, 0.5, 3.0, 1.0) == pytest.approx(500.0)
    joules = [0.0, 10.0, 20.0, 30.0]
    assert counter_energy(times, joules, 0.5, 2.5) == pytest.approx(20.0)
    assert counter_energy(times, joules, 1.2, 1.4) == pytest.approx(2.0)
    assert math.isnan(counter_energy(times, joules, 2.5, 3.5))  # no update after the window
    # readings kept only on change: a long gap means the value held until one update before the next change
    held = with_hold_points([0.0, 0.1, 1.0], [100.0, 200.0, 300.0], update_s=0.1)
    assert held == ([0.0, 0.1, 0.9, 1.0], [100.0, 200.0, 200.0, 300.0])
    assert trapezoid_energy(*held, 0.1, 1.0) == pytest.approx(200 * 0.8 + 250 * 0.1)


def test_idle_baseline_gives_net_energy_and_update_periods_are_inferred():
    clock, gpu, nvml = sim(counter_update_s=0.05)
    meter = make_energy_meter({**FAST, "idle_baseline_s": 3.0, "trials": 2, "target_bound": 0.0005}, [0], nvml=nvml,
                              clock=clock)  # a bound this tight: the 0.4 s run is repeated, in two trials
    info = meter.describe()
    assert info["energy_idle_power_w"] == pytest.approx(70.0, abs=0.3)
    assert info["energy_update_period_s.nvml-counter"] == pytest.approx(0.05, abs=0.002)
    assert info["energy_update_period_s.nvml-power-instant"] == pytest.approx(0.1, abs=0.002)
    m = meter.measure("p", lambda: gpu.run([(0.4, 300.0)]))
    results, reading = m.results, m.reading
    assert reading.net_energy_per_run_j == pytest.approx(reading.energy_per_run_j - reading.idle_power_w * reading.duration_s)
    assert reading.net_energy_per_run_j == pytest.approx(230.0 * 0.4, rel=0.01)
    assert reading.repetitions == len(results) and reading.trials == 2
    record = reading.as_record(new_tokens=10 * len(results))
    assert record["energy.j_per_token"] == pytest.approx(reading.energy_per_run_j / 10)
    assert record["energy.net_j_per_token"] == pytest.approx(reading.net_energy_per_run_j / 10)
    meter.close()


def test_protocol_repeats_discards_the_rise_and_divides():
    clock, gpu, nvml = sim()
    cfg = {**FAST, "trials": 3, "min_window_s": 2.0, "discard_rise_s": 0.2, "target_bound": 1e-5}  # always repeated
    meter = make_energy_meter(cfg, [0], nvml=nvml, clock=clock)
    calls = []
    m = meter.measure("p", lambda: calls.append(1) or gpu.run([(0.3, 300.0)]))
    results, reading = m.results, m.reading
    # per trial: one run in the rise (discarded), then 7 runs (2.1 s >= 2 s)
    assert len(calls) == 3 * 8 and len(results) == reading.repetitions == 3 * 7
    assert reading.duration_s == pytest.approx(0.3)
    assert reading.energy_per_run_j == pytest.approx(statistics.mean(results), rel=0.005)
    assert reading.trial_spread < 0.01
    assert reading.polled_energy_j == pytest.approx(reading.energy_per_run_j, rel=0.02)
    short = make_energy_meter({**cfg, "min_repetitions": 4}, [0], nvml=nvml, clock=clock)
    m = short.measure("p", lambda: gpu.run([(0.05, 300.0)]))
    results, reading = m.results, m.reading
    assert reading.repetitions == 3 * 4  # 32 runs or 5 s, whichever comes first (here: 4 runs)
    short.close()
    meter.close()


def test_multi_gpu_energy_is_summed():
    clock = SimClock(10.0)
    gpus = [SimGPU(clock, uuid="GPU-a"), SimGPU(clock, uuid="GPU-b", power_phase_s=0.061, counter_phase_s=0.043)]
    nvml = SimulatedNVML(gpus, clock)
    meter = make_energy_meter({**FAST, "protocol": False}, [0, 1], nvml=nvml, clock=clock)
    assert meter.describe()["energy_gpus"] == [gpus[0].name, gpus[1].name]
    start = clock.now()
    gpus[1].hold(150.0)
    m = meter.measure("two gpus", lambda: gpus[0].run([(4.0, 300.0)]))
    results, reading = m.results, m.reading
    truth = results[0] + gpus[1].energy(clock.now()) - gpus[1].energy(start)
    assert reading.energy_per_run_j == pytest.approx(truth, rel=0.01)
    meter.close()


# ---- failure, threads, configuration ----------------------------------------------------------------

def test_nvml_failing_mid_run_gives_nan_and_reason_not_a_crash():
    clock, gpu, nvml = sim()
    meter = make_energy_meter({**FAST, "trials": 2, "min_window_s": 2.0}, [0], nvml=nvml, clock=clock)
    nvml.fail_at(clock.now() + 0.25)  # the GPU is lost while the (single, 0.5 s) run goes on
    m = meter.measure("p", lambda: gpu.run([(0.5, 300.0)]))
    results, reading = m.results, m.reading
    assert results and all(r > 0 for r in results)  # the workload itself ran to the end
    assert math.isnan(reading.energy_per_run_j) and math.isnan(reading.energy_all_runs_j)
    assert "GPU is lost" in reading.reason
    record = reading.as_record(new_tokens=100)
    assert math.isnan(record["energy.j_per_token"]) and "GPU is lost" in record["energy.reason"]
    m = meter.measure("q", lambda: gpu.run([(0.5, 300.0)]))
    again, later = m.results, m.reading
    assert again and math.isnan(later.energy_per_run_j) and "GPU is lost" in later.reason
    meter.close()
    assert nvml.shutdown_count == nvml.init_count == 1


def test_sampler_thread_starts_and_stops_cleanly_in_real_time():
    before = {t.ident for t in threading.enumerate()}
    clock = RealClock()
    gpu = SimGPU(clock)
    nvml = SimulatedNVML([gpu], clock)
    cfg = {"protocol": False, "idle_baseline_s": 0.0, "infer_update_period_s": 0.0}
    for _ in range(3):
        meter = make_energy_meter(cfg, [0], nvml=nvml, clock=clock)
        assert any(t.name == "harness-energy-sampler" for t in threading.enumerate())
        m = meter.measure("p", lambda: gpu.run([(0.4, 250.0)]))
        results, reading = m.results, m.reading
        assert reading.reason is None and reading.energy_per_run_j == pytest.approx(results[0], rel=0.25)  # real-time jitter
        meter.close()
        meter.close()  # idempotent
    time.sleep(0.05)
    assert {t.ident for t in threading.enumerate()} == before
    assert nvml.init_count == nvml.shutdown_count == 3


def test_failure_in_the_real_sampler_thread_is_reported():
    clock = RealClock()
    gpu = SimGPU(clock)
    nvml = SimulatedNVML([gpu], clock)
    meter = make_energy_meter({"protocol": False, "idle_baseline_s": 0.0, "infer_update_period_s": 0.0}, [0],
                              nvml=nvml, clock=clock)
    nvml.fail_at(clock.now() + 0.1)
    reading = meter.measure("p", lambda: gpu.run([(0.3, 250.0)])).reading
    assert math.isnan(reading.energy_per_run_j) and "GPU is lost" in reading.reason
    assert meter.sampler.driver.is_alive()  # the thread outlived the error
    meter.close()


def test_sampler_skips_unchanged_readings():
    class Steady(Channel):
        name, kind, handles = "steady", "power", [0]

        def __init__(self):
            self.value = 100.0

        def read_one(self, handle):
            return self.value

    clock = SimClock()
    channel = Steady()
    sampler = Sampler([channel], clock, 0.02)
    sampler.start()
    clock.sleep(1.0)
    channel.value = 120.0
    clock.sleep(1.0)
    sampler.stop()
    [series] = sampler.snapshot("steady")
    assert series.initial == 100.0 and series.values == [120.0]  # ~100 polls, one change


def test_no_gpu_or_off_means_nan_with_reason():
    meter = make_energy_meter(None, [])
    assert isinstance(meter, NullMeter) and "CPU" in meter.reason
    m = meter.measure("p", lambda: 42)
    results, reading = m.results, m.reading
    assert results == [42] and math.isnan(reading.energy_per_run_j) and reading.reason == meter.reason
    assert math.isnan(reading.as_record(new_tokens=5)["energy.j_per_token"])
    window = meter.start_window("cell")
    assert math.isnan(meter.stop_window(window).energy_per_run_j)
    assert "off" in make_energy_meter({"name": "off", "source": "none"}, [0]).reason
    cpu_profile = OmegaConf.to_container(OmegaConf.load(os.path.join(CONF, "gpu", "cpu.yaml")))
    assert "no power reading" in make_energy_meter({"gpu": cpu_profile}, [0]).reason


def test_no_counter_and_no_power_source_reasons():
    clock, gpu, nvml = sim(has_counter=False)
    meter = make_energy_meter({**FAST, "source": "counter"}, [0], nvml=nvml, clock=clock)
    assert isinstance(meter, NullMeter) and "nvmlDeviceGetTotalEnergyConsumption" in meter.reason
    auto = make_energy_meter(FAST, [0], nvml=nvml, clock=clock)  # falls back to polled power
    assert isinstance(auto, GpuEnergyMeter) and auto.primary.name == "nvml-power-instant"
    auto.close()
    sources = open_sources([0], "power-usage", nvml)
    assert sources.power.name == "nvml-power-usage" and sources.counter is None
    sources.close()


def test_gpu_profile_figures_apply_only_to_matching_gpus():
    clock, gpu, nvml = sim(name="NVIDIA L40S", architecture=8, has_instant=False, usage_window_s=1.0)
    l40 = OmegaConf.to_container(OmegaConf.load(os.path.join(CONF, "gpu", "l40.yaml")))
    meter = make_energy_meter({**FAST, "gpu": l40, "source": "power"}, [0], nvml=nvml, clock=clock)
    assert meter.primary.semantics.window_s == 1.0  # 1 s average: not part-time, no phase shifting
    assert not polled.phase_shifting(meter.state)
    assert meter.describe()["energy_profile_note"] is None
    meter.close()
    h100 = OmegaConf.to_container(OmegaConf.load(os.path.join(CONF, "gpu", "h100.yaml")))
    meter = make_energy_meter({**FAST, "gpu": h100, "source": "power"}, [0], nvml=nvml, clock=clock)
    assert "does not fit" in meter.describe()["energy_profile_note"]
    assert meter.primary.semantics.window_s == 1.0  # the H100 figures were not applied to an L40S
    meter.close()


def test_summary_of_records():
    good = EnergyReading(source="nvml-counter", energy_per_run_j=10.0, net_energy_per_run_j=6.0, energy_all_runs_j=40.0,
                         measured_s=4.0, repetitions=4, coverage=1.0, idle_power_w=4.0)
    summary = summarize_records([good.as_record(new_tokens=80), good.as_record(new_tokens=120)])
    assert summary["energy.j_per_token"] == pytest.approx(80 / 200)
    assert summary["energy.net_j_per_token"] == pytest.approx(48 / 200)
    assert summary["energy.mean_power_w"] == pytest.approx(10.0)
    bad = EnergyReading(reason="NVML read failed").as_record(new_tokens=50)
    summary = summarize_records([good.as_record(new_tokens=80), bad])
    assert math.isnan(summary["energy.j_per_token"]) and "1 of 2 prompts" in summary["energy.reason"]


def test_power_probe_on_a_machine_without_gpu(capsys):
    from harness.tools.probe import main

    if os.path.exists("/dev/nvidiactl"):
        pytest.skip("this machine has an NVIDIA driver")
    assert main(["--poll-seconds", "0", "--idle-seconds", "0"]) == 0
    assert "No NVIDIA GPU found" in capsys.readouterr().out


def test_power_probe_on_simulated_gpus():
    from harness.tools.probe import probe, render

    clock, gpu, nvml = sim()
    report = probe(0.5, 1.0, nvml=nvml, clock=clock)
    sources = report["gpus"][0]["sources"]
    assert sources["nvml-counter"]["inferred_update_s"] == pytest.approx(0.1, abs=0.002)
    assert sources["nvml-power-instant"]["idle_w"] == pytest.approx(70.0, abs=0.5)
    assert not sources["nvml-power-average"]["available"]
    assert "H100" in render(report)


def _fake_nvidia_smi(tmp_path, monkeypatch, body: str) -> None:
    fake = tmp_path / "nvidia-smi"
    fake.write_text("#!/bin/sh\n" + body + "\n")
    fake.chmod(0o755)
    monkeypatch.setenv("PATH", f"{tmp_path}{os.pathsep}{os.environ['PATH']}")


def test_nvidia_smi_fallback_streams_per_gpu_power(tmp_path, monkeypatch):
    _fake_nvidia_smi(tmp_path, monkeypatch, "while true; do echo 151.25; echo 48.75; sleep 0.01; done")
    meter = make_energy_meter({"source": "smi", "protocol": False, "idle_baseline_s": 0.0,
                               "infer_update_period_s": 0.0}, [0, 1])
    assert meter.primary.name == "nvidia-smi" and meter.primary.read() == [151.25, 48.75]
    reading = meter.measure("p", lambda: time.sleep(0.2)).reading
    assert reading.reason is None and reading.mean_power_w == pytest.approx(200.0)
    smi = meter.primary
    meter.close()
    assert smi.process.poll() is not None and not smi.reader.is_alive()  # child and reader thread are gone


def test_nvidia_smi_without_readings_is_reported(tmp_path, monkeypatch):
    _fake_nvidia_smi(tmp_path, monkeypatch, "echo '[N/A]'; sleep 5")
    meter = make_energy_meter({"source": "smi"}, [0])
    assert isinstance(meter, NullMeter) and "[N/A]" in meter.reason


def test_the_real_clock_treats_a_deadline_already_past_as_now():
    """A baseline watcher that overran its span on a busy host asks to sleep a negative time: no ValueError (a cell on
    a simulated GPU in real time failed so), the same contract as the simulated clock."""
    from harness.energy.sampler import RealClock
    from harness.energy.simulated import SimClock

    RealClock.sleep(-0.05)
    clock = SimClock()
    before = clock.now()
    clock.sleep(-0.05)
    assert clock.now() == before
