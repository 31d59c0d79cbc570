"""Issue 13 items 2, 5, 6 (energy side), 7, 8: the runner on a simulated GPU through the CLI, GPU
state and cool-down, sub-window attribution, harness-gpu-check's CPU path, host energy from RAPL."""
from __future__ import annotations

import json
import math
import os
import random
import subprocess
import sys
from pathlib import Path

import pynvml
import pytest

from harness.energy import make_energy_meter
from harness.energy.attribution import attribute
from harness.energy.host import HostEnergy
from harness.energy.simloads import llm_like_load
from harness.energy.simulated import SimClock, SimGPU, SimulatedNVML
from harness.errors import ConfigError

ROOT = Path(__file__).resolve().parents[2]
QUICK = {"idle_baseline_s": 0.5, "infer_update_period_s": 0.5, "host": False}


# ---- item 2: the whole runner path on a simulated GPU, through the CLI ------------------------------

@pytest.mark.slow  # whole processes / CLI sweeps (issue 21.10: `make test` in minutes; CI runs -m slow too)
def test_cli_on_a_simulated_gpu_writes_j_per_token_matching_the_exact_integral(tmp_path):
    env = dict(os.environ, HYDRA_FULL_ERROR="1", PYTHONPATH=str(ROOT))
    cmd = [sys.executable, "-m", "harness", "energy.source=simulated", "gpu=sim_h100", "pair.device=cpu",
           "dataset.num_prompts=2", "max_new_tokens=8", "runner.progress=false", "runner.warmup_new_tokens=2",
           "energy.min_window_s=0.4", "energy.idle_baseline_s=0.3", "energy.infer_update_period_s=0.5",
           f"results_dir={tmp_path}"]
    r = subprocess.run(cmd, env=env, capture_output=True, text=True, timeout=300, cwd=ROOT)
    assert r.returncode == 0, r.stdout + r.stderr
    [cell] = [p for p in (tmp_path / "cells").iterdir() if p.is_dir()]  # not .integrity.key
    records = [json.loads(line) for line in (cell / "records.jsonl").read_text().splitlines()]
    summary = json.loads((cell / "summary.json").read_text())
    assert len(records) == 2
    for rec in records:
        # issue 33.5: a simulated cell's provenance names the simulator, never a GPU's counter
        assert rec["energy.source"] == "simulated:nvml-counter" and rec["energy.reason"] is None
        exact = rec["energy.simulated_exact_energy_j"] * rec["energy.repetitions"] / rec["energy.tokens_all_runs"]
        assert rec["energy.j_per_token"] == pytest.approx(exact, rel=max(rec["energy.error_bound"], 1e-4))
        assert abs(rec["energy.j_per_token"] / exact - 1) < 0.01
        assert math.isfinite(rec["energy.polled_energy_j"]) and rec["energy.mode"] == "counter-aligned"
    assert summary["energy.j_per_token"] == pytest.approx(summary["energy.simulated_exact_j_per_token"], rel=0.01)
    assert summary["energy_meter"]["energy_simulated"] is True
    assert summary["gpu_state"]["available"] and summary["gpu_state"]["start"][0]["name"] == "Simulated H100"


def test_simulated_source_needs_a_simulated_gpu_profile():
    with pytest.raises(ConfigError, match="sim_h100"):
        make_energy_meter({"source": "simulated", "gpu": {"name": "auto"}}, [])


def test_simulated_source_draws_power_while_the_workload_runs():
    """Virtual time: the simulated GPU is busy exactly while the meter's workload runs."""
    clock = SimClock(0.0)
    profile = {"name": "sim", "simulated": {"active_w": 300.0, "idle_w": 60.0, "ripple_w": 0.0}}
    meter = make_energy_meter({**QUICK, "source": "simulated", "gpu": profile}, [], clock=clock)
    m = meter.measure("p", lambda: clock.sleep(2.0))
    assert m.reading.simulated_exact_energy_j == pytest.approx(600.0, rel=1e-9)
    assert m.reading.energy_per_run_j == pytest.approx(600.0, rel=1e-3)
    assert m.reading.net_energy_per_run_j == pytest.approx(480.0, rel=2e-3)
    # issue 33.5: provenance (records' energy.source, the summary's energy_source) names the simulator
    assert m.reading.source == "simulated:nvml-counter"
    assert meter.describe()["energy_source"] == "simulated:nvml-counter"
    meter.close()


# ---- item 5: GPU state per cell, cool-down -----------------------------------------------------------

def test_gpu_state_at_start_and_end_flags_throttling_and_shared_gpus():
    clock = SimClock(0.0)
    gpu = SimGPU(clock)
    meter = make_energy_meter(QUICK, [0], nvml=SimulatedNVML([gpu], clock), clock=clock)
    gpu.throttle_reasons_active = pynvml.nvmlClocksThrottleReasonSwPowerCap
    gpu.processes.append(type("P", (), {"pid": 424242, "usedGpuMemory": 2**30})())
    gpu.hold(650.0)
    clock.sleep(30.0)
    state = meter.gpu_state()
    meter.close()
    start, end = state["start"][0], state["end"][0]
    assert start["throttle_reasons"] == ["gpu_idle"] and not start["throttled"]
    assert end["throttle_reasons"] == ["sw_power_cap"] and end["throttled"]
    assert end["sm_clock_mhz"] > start["sm_clock_mhz"] and end["temperature_c"] > start["temperature_c"]
    assert start["power_limit_w"] == 700.0 and start["persistence_mode"] == 1
    assert state["throttled"] and state["throttle_reasons"] == ["sw_power_cap"]
    assert state["shared"] and state["other_pids"] == [424242]


def test_cool_down_waits_for_temperature_and_idle_power_to_settle_within_its_bound():
    clock = SimClock(0.0)
    gpu = SimGPU(clock, thermal_tau_s=20.0)
    gpu.run([(60.0, 600.0)])  # a hot previous cell
    hot = SimulatedNVML([gpu], clock).nvmlDeviceGetTemperature(0, 0)
    meter = make_energy_meter({**QUICK, "cooldown_s": 120.0}, [0], nvml=SimulatedNVML([gpu], clock), clock=clock)
    info = meter.describe()
    assert info["energy_cooldown_settled"] and 20.0 <= info["energy_cooldown_s"] <= 40.0
    assert meter.gpu_state()["start"][0]["temperature_c"] < hot - 30
    meter.close()
    gpu.run([(60.0, 600.0)])
    bounded = make_energy_meter({**QUICK, "cooldown_s": 3.0}, [0], nvml=SimulatedNVML([gpu], clock), clock=clock)
    info = bounded.describe()
    assert not info["energy_cooldown_settled"] and info["energy_cooldown_s"] == pytest.approx(3.0, abs=0.6)
    assert "cooldown_s=3" in info["energy_cooldown_reason"]
    bounded.close()


# ---- item 6 (energy side): attributing a window's energy to sub-windows ----------------------------

def speculative_generation(clock, gpu, rng, rounds, draft_steps, verify_s):
    spans = {"prefill": [], "draft": [], "verify": []}
    truth = dict.fromkeys(spans, 0.0)
    pieces, t = [], clock.now()

    def add(label, seconds, watts):
        nonlocal t
        spans[label].append((t, t + seconds))
        truth[label] += seconds * watts
        pieces.append((seconds, watts))
        t += seconds
    add("prefill", 0.04, 450.0)
    for _ in range(rounds):
        add("draft", 0.004 * draft_steps(rng), 150.0)  # γ cached draft steps of 4 ms
        add("verify", verify_s(rng), 380.0)
    gpu.run(pieces)
    return spans, truth, t


def test_counter_energy_is_split_among_prefill_draft_and_verify_windows():
    """A speculative generation: 40 ms prefill at 450 W, then rounds of γ draft steps (4 ms each at
    150 W, γ varying with acceptance) and a verification (11-17 ms at 380 W). With the spans'
    timestamps the counter's energy splits back into the three (counter intervals mix them
    differently because rounds vary)."""
    clock = SimClock(0.0)
    gpu = SimGPU(clock, ripple_w=0.0)
    meter = make_energy_meter(QUICK, [0], nvml=SimulatedNVML([gpu], clock), clock=clock)
    rng = random.Random(0)
    recorded = {}
    m = meter.measure("generation", lambda: recorded.update(zip(("spans", "truth", "end"), speculative_generation(
        clock, gpu, rng, 150, lambda r: r.randint(1, 6), lambda r: r.uniform(0.011, 0.017)))))
    spans, truth = recorded["spans"], recorded["truth"]
    [(start, end)] = m.windows  # the measured window: one run, edges on counter refreshes
    assert end == pytest.approx(recorded["end"])
    split = meter.attribute(start, end, spans)
    assert split.reason is None and split.intervals >= 30
    assert split.energy_j["prefill"] == pytest.approx(truth["prefill"], rel=0.02)
    for label in ("draft", "verify"):  # partly collinear (every interval holds several rounds): a few %
        assert split.energy_j[label] == pytest.approx(truth[label], rel=0.05), label
        assert abs(split.energy_j[label] - truth[label]) <= 3 * split.energy_sigma_j[label]
    assert sum(split.energy_j.values()) == pytest.approx(sum(truth.values()), rel=0.005)
    # perfectly regular rounds mix draft and verify identically in every interval: not identifiable
    start = clock.now()
    spans, truth, end = speculative_generation(clock, gpu, rng, 100, lambda r: 2, lambda r: 0.012)
    clock.sleep(0.3)
    assert "told apart" in meter.attribute(start, end, spans).reason
    meter.close()


def test_attribution_reports_what_it_cannot_split():
    times, joules = [0.0, 0.1], [0.0, 30.0]
    split = attribute(times, joules, {"a": [(0.2, 0.3)]}, (0.2, 0.3))
    assert split.reason and math.isnan(split.energy_j["a"])


# ---- item 7: harness-gpu-check on a CPU --------------------------------------------------------------

@pytest.mark.slow  # whole processes / CLI sweeps (issue 21.10: `make test` in minutes; CI runs -m slow too)
def test_gpu_check_on_a_cpu_runs_the_steps_on_tiny_shapes_and_says_what_it_could_not_measure(tmp_path):
    """Issue 23 item 11: without a GPU the sensors and a short cell through the real measurement path
    (meter.measure around the decoder, every protocol) run against a simulated H100; every figure
    says how it was obtained; --quick labels the k it measured and calls a 2-round ratio inconclusive."""
    from harness.tools.gpu_check import main

    assert main(["--quick", "--out", str(tmp_path), "--max-k", "4"]) == 0
    result = json.loads((tmp_path / "gpu_check.json").read_text())
    markdown = (tmp_path / "gpu_check.md").read_text()
    assert "no CUDA GPU" in " ".join(result["not_measured"].values())
    [sim] = result["gpus"].values()
    figures = sim["figures"]
    assert figures["nvml-counter lag"]["status"] == "measured (simulated)" and figures["nvml-counter lag"]["value"] < 0.005
    assert abs(figures["nvml-power-instant averaging window"]["value"] - 0.025) < 0.004
    assert figures["nvml-counter resolution"]["value"] == pytest.approx(0.001)
    assert 0.5 < figures["nvml-counter post-load idle settle time"]["value"] < 2.0  # the simulated 1 s hysteresis
    assert all(f["status"].split(" (")[0] in ("measured", "inferred", "not measured") for f in figures.values())
    profile = sim["sensor_profile"]  # issue 30: per reading, what was measured (never saved for a simulated GPU)
    assert profile["readings"]["nvml-counter"]["lag_s"] < 0.005
    assert profile["readings"]["nvml-power-instant"]["update_s"] == pytest.approx(0.1, abs=0.002)
    for name, figs in profile["readings"].items():  # only what was measured goes into a profile
        assert all(figures[f"{name} {label}"]["status"] == "measured (simulated)" for key, label in
                   (("update_s", "update period"), ("window_s", "averaging window"), ("lag_s", "lag")) if key in figs)
    assert profile["device"]["driver"] and profile["device"]["date"]
    # the run records its wall time against its budget (whether it kept it is a measurement for the notes, not a
    # unit-test assertion on the real clock: the guide's rule)
    run_time_s, budget_s = result["elapsed_s"], result["budget_s"]
    assert math.isfinite(run_time_s) and run_time_s > 0 and budget_s > 0
    cell = sim["cell"]
    assert set(cell["cells"]) == {"counter", "polled", "naive"} and math.isfinite(cell["polled_vs_counter_same_windows"])
    # issue 30: every meter on the same prompts, the cold first run left out
    assert cell["same_prompts"] and cell["warm_up_excluded"]
    # (a CPU decoder's run time, hence its simulated energy, varies with the machine's load: finite, not small)
    assert math.isfinite(cell["vs_counter_per_prompt_median"]["polled"])
    assert not any(p["cross_check_flag"] for p in cell["cells"]["counter"]["prompts"])  # within the polled bound
    assert cell["external"]["measured"] is False
    assert set(result["cost_curves"]) == {"tiny (embedded)", "tiny synthetic (random weights)"}
    curve = result["cost_curves"]["tiny (embedded)"]["verification"]
    assert set(map(int, curve["seconds"])) == {1, 2, 4} and result["cost_curves"]["tiny (embedded)"]["c_draft_over_target"] > 0
    assert "k=4" in markdown and "k=64" not in markdown and "k=8" not in markdown
    assert result["sampler_overhead"]["status"].startswith("inconclusive") and "inconclusive" in markdown
    assert "Not measured here" in markdown and "HBM roofline" in markdown and "measured (simulated)" in markdown


def test_external_meter_log_is_integrated_over_the_windows(tmp_path):
    from harness.tools.checks import external_energy
    from harness.tools.gpu_check import read_external

    path = tmp_path / "meter.csv"
    path.write_text("time,watts\n" + "\n".join(f"{1000 + 0.5 * i},{100 + 10 * (i % 2)}" for i in range(20)))
    log = read_external(str(path))
    assert external_energy(log, 1001.0, 1003.0) == pytest.approx(210.0, rel=0.03)
    assert math.isnan(external_energy(log, 990.0, 1003.0))  # not covered


def test_gpu_check_is_a_console_script():
    text = (ROOT / "pyproject.toml").read_text()
    assert 'harness-gpu-check = "harness.tools.gpu_check:main"' in text


# ---- item 8: host energy from RAPL --------------------------------------------------------------------

def powercap_tree(root: Path, zones: dict[str, tuple[str, int, int]]) -> Path:
    """zones: directory name → (name, energy_uj, max_energy_range_uj)."""
    for directory, (name, energy, max_range) in zones.items():
        zone = root / directory
        zone.mkdir(parents=True)
        (zone / "name").write_text(name + "\n")
        (zone / "energy_uj").write_text(f"{energy}\n")
        (zone / "max_energy_range_uj").write_text(f"{max_range}\n")
    return root


def set_uj(root: Path, directory: str, value: int) -> None:
    (root / directory / "energy_uj").write_text(f"{value}\n")


INTEL = {"intel-rapl:0": ("package-0", 1_000_000, 262_143_328_850), "intel-rapl:0:0": ("core", 500_000, 262_143_328_850),
         "intel-rapl:0:1": ("dram", 2_000_000, 65_712_999_613), "intel-rapl:1": ("package-1", 3_000_000, 262_143_328_850),
         "intel-rapl-mmio:0": ("package-0", 9_000_000, 262_143_328_850)}


def test_rapl_sums_packages_and_dram_and_skips_subzones_and_mmio(tmp_path):
    root = powercap_tree(tmp_path / "powercap", INTEL)
    host = HostEnergy(root)
    first = host.read()
    set_uj(root, "intel-rapl:0", 11_000_000)      # +10 J
    set_uj(root, "intel-rapl:1", 8_000_000)       # +5 J
    set_uj(root, "intel-rapl:0:0", 99_000_000)    # core: part of the package, not added again
    set_uj(root, "intel-rapl:0:1", 4_500_000)     # +2.5 J
    set_uj(root, "intel-rapl-mmio:0", 99_000_000)  # duplicate of the package: skipped
    second = host.read()
    assert second["cpu"] - first["cpu"] == pytest.approx(15.0)
    assert second["dram"] - first["dram"] == pytest.approx(2.5)
    assert math.isnan(second["platform"]) and host.reason is None


def test_rapl_counter_wrap_around(tmp_path):
    max_range = 262_143_328_850
    root = powercap_tree(tmp_path / "powercap", {"intel-rapl:0": ("package-0", max_range - 2_000_000, max_range)})
    host = HostEnergy(root)
    before = host.read()["cpu"]
    set_uj(root, "intel-rapl:0", 3_000_000)  # wrapped: 2 J to the top, then 3 J
    assert host.read()["cpu"] - before == pytest.approx(5.0)
    set_uj(root, "intel-rapl:0", 4_000_000)
    assert host.read()["cpu"] - before == pytest.approx(6.0)


def test_rapl_amd_has_no_dram_and_says_so(tmp_path):
    root = powercap_tree(tmp_path / "powercap", {"intel-rapl:0": ("package-0", 10, 65_532_610_987),
                                                 "intel-rapl:0:0": ("core", 5, 65_532_610_987)})
    host = HostEnergy(root)
    assert host.available and host.groups() == ["cpu"]
    assert math.isnan(host.read()["dram"]) and "AMD" in host.missing["dram"]


def test_rapl_unreadable_or_missing_gives_nan_with_the_reason(tmp_path, monkeypatch):
    root = powercap_tree(tmp_path / "powercap", {"intel-rapl:0": ("package-0", 10, 1000)})
    real = Path.read_text

    def denied(self, *args, **kwargs):
        if self.name == "energy_uj":
            raise PermissionError(13, "Permission denied", str(self))
        return real(self, *args, **kwargs)
    monkeypatch.setattr(Path, "read_text", denied)
    host = HostEnergy(root)
    assert not host.available and "root only" in host.reason and "CVE-2020-8694" in host.reason
    monkeypatch.undo()
    missing = HostEnergy(tmp_path / "nowhere")
    assert not missing.available and "no powercap tree" in missing.reason


def test_host_energy_is_recorded_per_window_beside_the_gpu_and_on_a_cpu_only_run(tmp_path):
    root = powercap_tree(tmp_path / "powercap", INTEL)
    meter = make_energy_meter({"powercap_root": str(root)}, [])  # a CPU-only cell: GPU energy NaN
    window = meter.start_window("prompt")
    set_uj(root, "intel-rapl:0", 21_000_000)       # +20 J
    set_uj(root, "intel-rapl:0:1", 7_000_000)      # +5 J
    reading = meter.stop_window(window)
    assert math.isnan(reading.energy_per_run_j) and "CPU" in reading.reason
    assert reading.host_cpu_energy_j == pytest.approx(20.0) and reading.host_dram_energy_j == pytest.approx(5.0)
    record = reading.as_record(new_tokens=50)
    assert record["energy.host_j_per_token"] == pytest.approx(25.0 / 50)
    here = make_energy_meter({}, []).measure("p", lambda: 1).reading  # this VM: no powercap
    if not Path("/sys/class/powercap").exists():
        assert math.isnan(here.host_energy_j) and "no powercap tree" in here.host_reason
    # beside a (simulated) GPU's reading, over the same measured windows
    clock = SimClock(0.0)
    gpu = SimGPU(clock)
    gpu_meter = make_energy_meter({**QUICK, "host": True, "powercap_root": str(root)}, [0],
                                  nvml=SimulatedNVML([gpu], clock), clock=clock)
    rng = random.Random(0)

    def workload():
        pieces = llm_like_load(rng, 1.5)
        e = gpu.run(pieces)
        set_uj(root, "intel-rapl:0", int(HostEnergy(root).zones[0].read_uj() + 30_000_000))
        return e
    m = gpu_meter.measure("p", workload)
    gpu_meter.close()
    assert m.reading.reason is None and math.isfinite(m.reading.energy_per_run_j)
    assert m.reading.host_cpu_energy_j == pytest.approx(30.0)
