"""The steps of ``harness-gpu-check`` that run the harness itself: a short cell measured through the
real path (``meter.measure`` around the decoder's generations) with every protocol and an external
meter's log, the same against a simulated GPU where there is none, the sampler's overhead, and the
report."""
from __future__ import annotations

import math
import random
import time

NAIVE = {"name": "naive", "source": "power-usage", "sample_hz": 1, "integration": "sum", "skip_unchanged": False,
         "align_timestamps": False, "protocol": False, "idle_baseline_s": 0.0, "idle_every_s": None,
         "infer_update_period_s": 0.0, "host": False}
TEXTS = ["In the beginning God created", "And the earth was without form", "Blessed are the meek",
         "The LORD is my shepherd", "Let there be light", "Whatsoever a man soweth"]


def _meters(quick: bool) -> dict[str, dict]:
    return {"counter": {"source": "counter", "host": False},
            "polled": {"source": "power", "min_window_s": 0.5 if quick else 1.0, "host": False}, "naive": NAIVE}


def external_energy(log: list[tuple[float, float, str]], a: float, b: float) -> float:
    """Energy (J) an external meter's log gives over [a, b] (Unix seconds): trapezoid over watts, or
    the interpolated difference of cumulative joules; NaN where the log does not cover [a, b]."""
    if not log or log[0][0] > a or log[-1][0] < b:
        return math.nan
    times, values = [r[0] for r in log], [r[1] for r in log]

    def at(t: float) -> float:
        i = max(j for j, x in enumerate(times) if x <= t)
        if i + 1 == len(times):
            return values[i]
        return values[i] + (values[i + 1] - values[i]) * (t - times[i]) / (times[i + 1] - times[i])

    if log[0][2] == "joules":
        return at(b) - at(a)
    knots = [a] + [t for t in times if a < t < b] + [b]
    return sum((at(t0) + at(t1)) / 2 * (t1 - t0) for t0, t1 in zip(knots, knots[1:]))


def measure_cell(make_meter, prompts: list, generate, external=None, offset: float = 0.0, warmup: int = 1) -> dict:
    """Each prompt through ``meter.measure`` (as the runner does) with one meter: per-prompt readings
    and the cell's J/token; the external meter's energy over the same windows where there is a log.
    The first prompt is measured ``warmup`` times first and left out (a cold first run is not the
    method's energy), so every meter's figure covers the same prompts."""
    rows, energy, tokens, ext = [], 0.0, 0, 0.0
    with make_meter() as meter:
        for i in range(warmup if prompts else 0):
            meter.measure(f"warm-up {i}", lambda: generate(prompts[0], 0))
        for i, ids in enumerate(prompts):
            m = meter.measure(f"prompt {i}", lambda ids=ids, i=i: generate(ids, i))
            r = m.reading
            n = sum(g.stats.new_tokens for g in m.results)
            energy, tokens = energy + r.energy_all_runs_j, tokens + n
            if external is not None:
                ext += sum(external_energy(external, a + offset, b + offset) for a, b in m.windows)
            rows.append({"j_per_token": r.energy_all_runs_j / n if n else math.nan, "error_bound": r.error_bound,
                         "mode": r.mode, "repetitions": r.repetitions, "cross_check_diff": r.cross_check_diff,
                         "cross_check_flag": r.cross_check_flag, "cross_check_suspect": r.cross_check_suspect,
                         "reason": r.reason})
        described = meter.describe()
    return {"j_per_token": energy / tokens if tokens else math.nan, "energy_j": energy, "prompts": rows,
            "external_j": ext if external is not None else None, "source": described.get("energy_source"),
            "idle_definition": described.get("energy_idle_definition")}


def _median(values: list[float]) -> float:
    finite = sorted(v for v in values if math.isfinite(v))
    return finite[len(finite) // 2] if len(finite) % 2 else (sum(finite[len(finite) // 2 - 1:len(finite) // 2 + 1]) / 2
                                                             if finite else math.nan)


def _compare(cells: dict, external) -> dict:
    base = cells.get("counter", {}).get("j_per_token", math.nan)
    counter = cells.get("counter", {})
    diffs = [p["cross_check_diff"] for p in counter.get("prompts", []) if math.isfinite(p["cross_check_diff"])]
    per_prompt = {k: [p["j_per_token"] / q["j_per_token"] - 1 for p, q in zip(c["prompts"], counter.get("prompts", []))]
                  for k, c in cells.items() if k != "counter"}
    out = {"cells": cells, "same_prompts": len({len(c["prompts"]) for c in cells.values()}) == 1,
           "warm_up_excluded": True,
           "vs_counter": {k: c["j_per_token"] / base - 1 if base else math.nan
                          for k, c in cells.items() if k != "counter"},
           # the same prompts, each meter's J/token ÷ the counter's, prompt by prompt (median)
           "vs_counter_per_prompt_median": {k: _median(v) for k, v in per_prompt.items()},
           # the same windows, polled power beside the counter: free of run-to-run variation of the workload
           "polled_vs_counter_same_windows": sum(diffs) / len(diffs) if diffs else math.nan}
    if external is None:
        out["external"] = {"measured": False, "why": "no --external log given"}
    elif math.isfinite(counter.get("external_j") or math.nan):
        out["external"] = {"measured": True, "external_vs_counter": counter["external_j"] / counter["energy_j"] - 1,
                           "note": "an external meter sees what its wiring covers (often the whole node)"}
    else:
        out["external"] = {"measured": False, "why": "the log does not cover the cell's windows"}
    return out


def cell_comparison(index: int, args, external, log) -> dict:
    """The tiny pair generating on CUDA device ``index``, measured by every protocol."""
    from harness.methods import build_decoder
    from harness.energy import make_energy_meter
    from harness.models import load_pair

    pair = load_pair("tiny/target", "tiny/draft", device=f"cuda:{index}")
    decoder = build_decoder("ar_greedy", pair)
    prompts = [pair.tokenizer(t)["input_ids"] for t in TEXTS[:args.prompts]]
    decoder.generate(prompts[0], 4)
    offset = time.time() - time.perf_counter()
    cells = {}
    for name, cfg in _meters(args.quick).items():
        cells[name] = measure_cell(lambda cfg=cfg: make_energy_meter(cfg, [index]), prompts,  # the same prompts
                                   lambda ids, i: decoder.generate(ids, args.max_new_tokens, seed=i),
                                   external if name == "counter" else None, offset)
        log(f"    {name}: {cells[name]['j_per_token']:.4g} J/token")
    return _compare(cells, external)


def simulated_device(args, log) -> dict:
    """Steps 1-2 against a simulated H100 in virtual time: the same code, no hardware measured."""
    from harness.methods import build_decoder
    from harness.energy import make_energy_meter
    from harness.energy.characterize import characterize_sources
    from harness.energy.simulated import SimClock, SimGPU, SimulatedNVML
    from harness.energy.sources import open_sources
    from harness.models import load_pair

    clock = SimClock(100.0)
    gpu = SimGPU(clock, hysteresis_w=25.0, hysteresis_s=1.0)
    nvml = SimulatedNVML([gpu], clock)
    sources = open_sources([0], "auto", nvml, by_index=True)
    figures = characterize_sources(sources, lambda s: gpu.run([(s, 300.0)]), clock, quick=args.quick)
    from harness.energy.profiles import profile_of

    profile = profile_of(sources, figures, sources.channels())  # simulated: shown, never saved for runs to load
    sources.close()
    pair = load_pair("tiny/target", "tiny/draft", device="cpu")
    decoder = build_decoder("ar_greedy", pair)
    prompts = [pair.tokenizer(t)["input_ids"] for t in TEXTS[:args.prompts]]

    def generate(ids, i):  # the decoder runs on the CPU; the simulated GPU draws 300 W for as long
        start = time.perf_counter()
        g = decoder.generate(ids, args.max_new_tokens, seed=i)
        gpu.run([(time.perf_counter() - start, 300.0)])
        return g

    cells = {}
    for name, cfg in _meters(args.quick).items():
        cells[name] = measure_cell(lambda cfg=cfg: make_energy_meter(cfg, [0], nvml=nvml, clock=clock), prompts,
                                   generate)
        log(f"    {name} (simulated): {cells[name]['j_per_token']:.4g} J/token")
    return {"name": "simulated H100 (virtual time)", "simulated": True,
            "figures": {k: {**f.as_dict(), "status": f"{f.status} (simulated)"} for k, f in figures.items()},
            "cell": _compare(cells, None), "sensor_profile": profile}


def sampler_overhead(pair, rounds: int, prompts: int, max_new: int, use_nvml: bool, log) -> dict:
    """Tokens/s with the 50 Hz sampler ÷ without, in interleaved rounds (order alternating), ratio of
    totals with a bootstrap 95 % interval over rounds; inconclusive with fewer than five rounds or an
    interval that spans 1."""
    from harness.methods import build_decoder
    from harness.energy import NullMeter, make_energy_meter
    from harness.energy.sampler import RealClock
    from harness.energy.simulated import SimGPU, SimulatedNVML

    decoder = build_decoder("ar_greedy", pair)
    ids = [pair.tokenizer(t)["input_ids"] for t in TEXTS[:prompts]]
    decoder.generate(ids[0], 4)
    cfg = {"protocol": False, "idle_baseline_s": 0.0, "idle_settle_s": 0.0, "infer_update_period_s": 0.0,
           "host": False}

    def on_meter():
        if use_nvml:
            return make_energy_meter(cfg, pair.cuda_devices())
        clock = RealClock()
        return make_energy_meter(cfg, [0], nvml=SimulatedNVML([SimGPU(clock)], clock), clock=clock)

    per_round: dict[str, list[tuple[int, float]]] = {"off": [], "on": []}
    for r in range(rounds):
        for arm in (("off", "on") if r % 2 == 0 else ("on", "off")):
            meter = on_meter() if arm == "on" else NullMeter("sampler off")
            tokens = seconds = 0
            for i, p in enumerate(ids):
                g = meter.measure("p", lambda p=p, i=i: decoder.generate(p, max_new, seed=i)).result
                tokens, seconds = tokens + g.stats.new_tokens, seconds + g.stats.wall_time_s
            meter.close()
            per_round[arm].append((tokens, seconds))

    def ratio(rs):
        rate = {a: sum(per_round[a][i][0] for i in rs) / sum(per_round[a][i][1] for i in rs) for a in per_round}
        return rate["on"] / rate["off"]

    rng = random.Random(0)
    boot = sorted(ratio([rng.randrange(rounds) for _ in range(rounds)]) for _ in range(1000))
    value, ci = ratio(list(range(rounds))), [boot[24], boot[974]]
    conclusive = rounds >= 5 and not ci[0] <= 1.0 <= ci[1]
    status = "measured" if conclusive else (f"inconclusive: {rounds} rounds" if rounds < 5 else
                                            "inconclusive: the interval spans 1 (no overhead shown either way)")
    log(f"  sampler on ÷ off: {value:.4f} [{ci[0]:.4f}, {ci[1]:.4f}], {status}")
    return {"ratio_on_off": value, "ci95": ci, "rounds": rounds, "status": status, "prompts_per_round": prompts,
            "max_new_tokens": max_new, "polled": "nvml" if use_nvml else "simulated NVML (CPU: no GPU to poll)",
            "goal": ">= 0.99"}


def _flag_list(flags: list) -> str:
    """``(a, b)``: the distinct flags, sorted; empty without flags."""
    return "(" + ", ".join(sorted(set(flags))) + ")" if flags else ""


def _fmt(x, digits: int = 3) -> str:
    return "n/a" if x is None or (isinstance(x, float) and not math.isfinite(x)) else (
        f"{x:.{digits}g}" if isinstance(x, float) else str(x))


def _device_markdown(name: str, gpu: dict) -> list[str]:
    if gpu.get("measured") is False:
        return [f"### {name}", "", f"Not measured: {gpu['why']}", ""]
    lines = [f"### {gpu.get('name', name)}", "", "| figure | value | status | how |", "|---|---|---|---|"]
    lines += [f"| {k} | {_fmt(f['value'], 4)} {f['unit'] if f['value'] is not None else ''} | {f['status']} | "
              f"{f['how']} |" for k, f in gpu["figures"].items()]
    cell = gpu["cell"]
    lines += ["", "| protocol | J/token | vs counter | per prompt (median) | prompts | cross-check flags |",
              "|---|---|---|---|---|---|"]
    per_prompt = cell.get("vs_counter_per_prompt_median", {})
    for k, c in cell["cells"].items():
        flags = [p["cross_check_suspect"] for p in c["prompts"] if p["cross_check_flag"]]
        lines.append(f"| {k} | {_fmt(c['j_per_token'], 4)} | "
                     f"{'—' if k == 'counter' else _fmt(100 * cell['vs_counter'][k], 3) + ' %'} | "
                     f"{'—' if k == 'counter' else _fmt(100 * per_prompt.get(k, math.nan), 3) + ' %'} | "
                     f"{len(c['prompts'])} | {len(flags)} {_flag_list(flags)} |")
    lines += ["", "Every protocol measured the same prompts, after a warm-up run of the first one that is left out.",
              "", "Polled power vs counter over the same windows: "
              f"{_fmt(100 * cell['polled_vs_counter_same_windows'], 3)} "
              "% (the protocols' own cells above ran the workload separately: run-to-run variation included)"]
    ext = cell["external"]
    lines += ["", f"External meter: {_fmt(100 * ext['external_vs_counter'], 3)} % vs counter ({ext['note']})"
              if ext["measured"] else f"External meter: not measured ({ext['why']})", ""]
    return lines


def render_markdown(result: dict) -> str:
    lines = [f"# harness-gpu-check — {result['device']}", "", f"{result['started']} → {result.get('finished')}, "
             f"torch {result['torch']}, host {result['host']}" + (" (--quick)" if result.get("quick") else ""), ""]
    if result["not_measured"]:
        lines += ["## Not measured here", ""] + [f"- **{k}**: {v}" for k, v in result["not_measured"].items()] + [""]
    lines += ["## Sensors and the measured cell", ""]
    for name, gpu in result["gpus"].items():
        lines += _device_markdown(name, gpu)
    so = result["sampler_overhead"]
    lines += ["## Sampler overhead", "",
              f"tokens/s with the 50 Hz sampler ÷ without: {so['ratio_on_off']:.4f} (95 % CI "
              f"{so['ci95'][0]:.4f}-{so['ci95'][1]:.4f}, {so['rounds']} interleaved rounds; polling {so['polled']}; "
              f"goal ≥ 0.99) — **{so['status']}**", "", "## Cost curves", ""]
    ks = [k for k in result["ks"] if k > 1]
    lines += ["| pair | dtype | c = draft ÷ target step | " + " | ".join(f"k={k}" for k in ks) + " (× k=1) |",
              "|---|---|---|" + "---|" * len(ks)]
    for name, e in result["cost_curves"].items():
        if e.get("measured") is False:
            lines.append(f"| {name} | | not measured: {e['why']} |" + " |" * len(ks))
            continue
        ratio = e["verification"]["ratio_to_k1"]
        lines.append(f"| {name} | {e['dtype']} | {_fmt(e['c_draft_over_target'])} | " + " | ".join(
            _fmt(ratio.get(k, ratio.get(str(k))), 3) for k in ks) + " |")
    if "roofline_7b" in result:
        r = result["roofline_7b"]
        lines += ["", "## AR decoding vs HBM roofline (Llama-2-7B shape)", "",
                  f"{_fmt(r['ar_tokens_per_s'], 4)} tokens/s; "
                  f"roofline {_fmt(r['roofline_tokens_per_s_measured_bw'], 4)} "
                  f"tokens/s at the measured copy bandwidth {_fmt(r['copy_bandwidth_gbs'], 4)} GB/s "
                  f"({_fmt(100 * r['fraction_of_roofline'], 3)} %), {_fmt(r['roofline_tokens_per_s_nominal_bw'], 4)} "
                  f"at the nominal {_fmt(r['nominal_bandwidth_gbs'], 4)} GB/s"]
    return "\n".join(lines) + "\n"

