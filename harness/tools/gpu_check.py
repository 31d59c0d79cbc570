"""``harness-gpu-check``: one command that validates a GPU machine for this harness — no
downloads; ≤ 10 minutes on one GPU; writes ``gpu_check.json`` and ``gpu_check.md``.

Steps (issue 13, item 7):

1. **power probe** (``harness-power-probe``): sources and fields, inferred update periods, idle power;
2. **counter vs polled energy** on a ≥ 10 s bursty matrix-multiply workload (goal: polled within 5 %
   of the counter), with the seeds' 1 Hz sum beside them;
3. **update periods against the gpu profile** (``conf/gpu``) that matches the device;
4. **idle power** (from the probe);
5. **sampler overhead**: decoding tokens/s with the 50 Hz sampler ÷ without, interleaved rounds on
   the tiny pair (goal ≥ 0.99);
6. **cost curves that decide speculative speed-ups**: forward time of a k-token verification call
   ÷ a 1-token call (k = 1..64, KV cache of a 128-token prefix) for each target, and the draft ÷
   target cost c of one cached step — on synthetic models with random weights built from config
   (``AutoModelForCausalLM.from_config``) in the shapes of the seeds' pairs (Llama-2-7B / 68M,
   OPT-13B / 125M, Llama-3.1-8B / 3.2-1B; fp16 or bf16), and on the embedded tiny pair;
7. **AR decoding against the HBM roofline**: tokens/s of the 7B shape vs (bandwidth ÷ weight
   bytes), with bandwidth both measured (device copy) and nominal.

On a machine without a GPU it runs the same steps on tiny shapes (the tiny pair, a tiny synthetic
pair), exercises the energy code against a simulated GPU in virtual time (labelled as such), and
says plainly what it could not measure.
"""
from __future__ import annotations

import argparse
import json
import math
import platform
import random
import statistics
import sys
import time
from pathlib import Path

from harness.resources import conf_dir

CONF_GPU = conf_dir() / "gpu"

# The seeds' pairs (GUIDE §1), as configs: random weights, no download. Figures from the models' public configs.
LLAMA2_7B = {"model_type": "llama", "hidden_size": 4096, "intermediate_size": 11008, "num_hidden_layers": 32,
             "num_attention_heads": 32, "num_key_value_heads": 32, "vocab_size": 32000, "max_position_embeddings": 4096}
LLAMA_68M = {"model_type": "llama", "hidden_size": 768, "intermediate_size": 3072, "num_hidden_layers": 2,
             "num_attention_heads": 12, "num_key_value_heads": 12, "vocab_size": 32000, "max_position_embeddings": 2048}
OPT_13B = {"model_type": "opt", "hidden_size": 5120, "ffn_dim": 20480, "num_hidden_layers": 40,
           "num_attention_heads": 40, "vocab_size": 50272, "word_embed_proj_dim": 5120, "max_position_embeddings": 2048}
OPT_125M = {"model_type": "opt", "hidden_size": 768, "ffn_dim": 3072, "num_hidden_layers": 12,
            "num_attention_heads": 12, "vocab_size": 50272, "word_embed_proj_dim": 768, "max_position_embeddings": 2048}
LLAMA31_8B = {"model_type": "llama", "hidden_size": 4096, "intermediate_size": 14336, "num_hidden_layers": 32,
              "num_attention_heads": 32, "num_key_value_heads": 8, "vocab_size": 128256, "rope_theta": 500000.0,
              "max_position_embeddings": 8192}
LLAMA32_1B = {"model_type": "llama", "hidden_size": 2048, "intermediate_size": 8192, "num_hidden_layers": 16,
              "num_attention_heads": 32, "num_key_value_heads": 8, "vocab_size": 128256, "rope_theta": 500000.0,
              "max_position_embeddings": 8192, "tie_word_embeddings": True}
TINY_SYNTHETIC = ({"model_type": "llama", "hidden_size": 128, "intermediate_size": 256, "num_hidden_layers": 4,
                   "num_attention_heads": 4, "num_key_value_heads": 2, "vocab_size": 4096},
                  {"model_type": "llama", "hidden_size": 64, "intermediate_size": 128, "num_hidden_layers": 1,
                   "num_attention_heads": 2, "num_key_value_heads": 1, "vocab_size": 4096})
SEED_PAIRS = {"llama2-7b/68m": (LLAMA2_7B, LLAMA_68M, "float16"), "opt-13b/125m": (OPT_13B, OPT_125M, "float16"),
              "llama3.1-8b/3.2-1b": (LLAMA31_8B, LLAMA32_1B, "bfloat16")}
# nominal HBM bandwidth (GB/s) by a device-name fragment, for the roofline beside the measured copy bandwidth
NOMINAL_BANDWIDTH_GBS = {"H200": 4800, "H100 NVL": 3900, "H100 PCIe": 2000, "H100": 3350, "A100-SXM4-80GB": 2039,
                         "A100 80GB PCIe": 1935, "A100": 1555, "L40S": 864, "L40": 864, "RTX 4090": 1008,
                         "V100": 900, "T4": 320}


def _not_measured(why: str) -> dict:
    return {"measured": False, "why": why}


def synthetic_model(spec: dict, dtype, device):
    """A causal LM with random weights built from a config (no download)."""
    import torch
    from transformers import AutoConfig, AutoModelForCausalLM

    spec = dict(spec)
    config = AutoConfig.for_model(spec.pop("model_type"), **spec)
    with torch.device(device):
        model = AutoModelForCausalLM.from_config(config, dtype=dtype)
    return model.eval()


def _sync(device) -> None:
    import torch

    if str(device).startswith("cuda"):
        torch.cuda.synchronize(device)


def _timed(fn, device, reps: int) -> float:
    """Median seconds of ``fn()`` over ``reps`` runs after one warm-up."""
    fn()
    _sync(device)
    times = []
    for _ in range(reps):
        start = time.perf_counter()
        fn()
        _sync(device)
        times.append(time.perf_counter() - start)
    return statistics.median(times)


def verification_curve(model, ks: list[int], prefix: int, device, reps: int) -> dict:
    """Forward time of a k-token call on a KV cache of ``prefix`` tokens, for each k, and ÷ k=1."""
    import torch

    from harness.primitives.kv_cache import new_cache, truncate

    vocab = model.config.vocab_size
    gen = torch.Generator().manual_seed(0)
    ids = torch.randint(0, vocab, (1, prefix + max(ks)), generator=gen).to(device)
    cache = new_cache(model)
    with torch.inference_mode():
        model(ids[:, :prefix], past_key_values=cache, use_cache=True)
        seconds = {}
        for k in ks:
            def call(k=k):
                model(ids[:, prefix:prefix + k], past_key_values=cache, use_cache=True)
                truncate(cache, prefix)
            seconds[k] = _timed(call, device, reps)
    return {"prefix_tokens": prefix, "seconds": seconds, "ratio_to_k1": {k: s / seconds[ks[0]] for k, s in seconds.items()}}


def ar_tokens_per_s(model, device, tokens: int = 64, prefix: int = 32) -> float:
    """Greedy one-token steps with a KV cache (the AR baseline's inner loop), tokens per second."""
    import torch

    from harness.primitives.kv_cache import new_cache

    ids = torch.randint(0, model.config.vocab_size, (1, prefix), generator=torch.Generator().manual_seed(1)).to(device)
    with torch.inference_mode():
        cache = new_cache(model)
        out = model(ids, past_key_values=cache, use_cache=True)
        nxt = out.logits[:, -1:].argmax(-1)
        _sync(device)
        start = time.perf_counter()
        for _ in range(tokens):
            out = model(nxt, past_key_values=cache, use_cache=True)
            nxt = out.logits[:, -1:].argmax(-1)
        _sync(device)
    return tokens / (time.perf_counter() - start)


def copy_bandwidth_gbs(device, gib: float = 1.0) -> float:
    """Device memory bandwidth from a large device-to-device copy (read + write bytes ÷ time)."""
    import torch

    n = int(gib * 2**30) // 4
    a = torch.empty(n, dtype=torch.float32, device=device)
    b = torch.empty_like(a)
    seconds = _timed(lambda: b.copy_(a), device, 10)
    del a, b
    return 2 * n * 4 / seconds / 1e9


def weight_bytes(model) -> int:
    return sum(p.numel() * p.element_size() for p in model.parameters())


def cost_curves(pairs: dict, ks: list[int], device, reps: int, log) -> dict:
    """Step 6 (and 7 for the 7B shape): per pair, the verification curve of the target and c."""
    import torch

    out = {}
    for name, build in pairs.items():
        started = time.perf_counter()
        try:
            target, draft, dtype = build()
        except Exception as e:  # out of memory, or a shape this transformers cannot build
            out[name] = _not_measured(f"could not build: {type(e).__name__}: {e}")
            continue
        curve = verification_curve(target, ks, 128 if str(device).startswith("cuda") else 32, device, reps)
        entry = {"dtype": dtype, "target_params": sum(p.numel() for p in target.parameters()),
                 "draft_params": sum(p.numel() for p in draft.parameters()), "verification": curve}
        draft_step = verification_curve(draft, [1], curve["prefix_tokens"], device, reps)["seconds"][1]
        entry["draft_step_s"], entry["target_step_s"] = draft_step, curve["seconds"][ks[0]]
        entry["c_draft_over_target"] = draft_step / curve["seconds"][ks[0]]
        if name == "llama2-7b/68m" and str(device).startswith("cuda"):
            entry["ar_tokens_per_s"] = ar_tokens_per_s(target, device)
            entry["weight_bytes"] = weight_bytes(target)
        entry["seconds_to_measure"] = time.perf_counter() - started
        out[name] = entry
        log(f"  {name}: c = {entry['c_draft_over_target']:.3f}, k=64/k=1 = "
            f"{curve['ratio_to_k1'].get(max(ks), math.nan):.2f} ({entry['seconds_to_measure']:.0f} s)")
        del target, draft
        if str(device).startswith("cuda"):
            torch.cuda.empty_cache()
    return out


def energy_steps(device_index: int, seconds: float, log) -> dict:
    """Steps 1-4 on a real GPU."""
    from harness.energy import make_energy_meter
    from harness.tools.probe import probe

    report = probe(poll_seconds=1.0, idle_seconds=2.0)
    out = {"probe": report}
    if not report["gpus"]:
        return out
    out["profile_check"] = profile_check(report)
    out["idle_w"] = {name: s["idle_w"] for g in report["gpus"] for name, s in g["sources"].items() if s["available"]}
    window = {"protocol": False, "idle_baseline_s": 2.0, "infer_update_period_s": 1.0, "host": True}
    naive = {"name": "naive", "source": "power-usage", "sample_hz": 1, "integration": "sum", "skip_unchanged": False,
             "align_timestamps": False, "protocol": False, "idle_baseline_s": 0.0, "infer_update_period_s": 0.0,
             "idle_every_s": None, "host": False}
    with make_energy_meter(window, [device_index]) as meter, make_energy_meter(naive, [device_index]) as seeds:
        run = bursty_workload(device_index, seconds)
        handles = (meter.start_window("bursty"), seeds.start_window("bursty"))
        run()
        counter, naive_reading = meter.stop_window(handles[0]), seeds.stop_window(handles[1])
        out["meter"] = meter.describe()
        out["gpu_state"] = meter.gpu_state()
    out["counter_vs_polled"] = {
        "seconds": counter.duration_s, "source": counter.source, "counter_j": counter.energy_j,
        "polled_j": counter.polled_energy_j, "naive_1hz_sum_j": naive_reading.energy_j,
        "polled_vs_counter": counter.cross_check_diff, "flagged": counter.cross_check_flag,
        "naive_vs_counter": _rel(naive_reading.energy_j, counter.energy_j), "mean_power_w": counter.mean_power_w,
        "host_energy_j": counter.host_energy_j, "host_reason": counter.host_reason, "reason": counter.reason,
        "goal": "|polled_vs_counter| <= 0.05"}
    log(f"  counter {counter.energy_j:.1f} J, polled {counter.polled_energy_j:.1f} J "
        f"({100 * counter.cross_check_diff:+.2f} %), naive 1 Hz {naive_reading.energy_j:.1f} J")
    return out


def _rel(x: float, ref: float) -> float:
    return (x - ref) / ref if math.isfinite(x) and math.isfinite(ref) and ref else math.nan


def profile_check(report: dict) -> list[dict]:
    """Inferred update periods against the conf/gpu profile matching each device's name."""
    import yaml

    profiles = [yaml.safe_load(p.read_text()) for p in sorted(CONF_GPU.glob("*.yaml"))]
    rows = []
    for gpu in report["gpus"]:
        match = next((p for p in profiles if p.get("match") and any(m.lower() in gpu["name"].lower()
                                                                     for m in p["match"])), None)
        for name, s in gpu["sources"].items():
            if not s["available"] or s["documented_update_s"] is None and (match is None or name == "nvml-counter"):
                continue
            expected = (match or {}).get("power_update_s") if name != "nvml-counter" else None
            expected = expected if expected is not None else s["documented_update_s"]
            rows.append({"gpu": gpu["name"], "source": name, "profile": (match or {}).get("name"),
                         "inferred_update_s": s["inferred_update_s"], "profile_update_s": expected,
                         "agrees": (abs(s["inferred_update_s"] - expected) <= 0.1 * expected
                                    if expected and math.isfinite(s["inferred_update_s"]) else None)})
    return rows


def bursty_workload(device: int, seconds: float, seed: int = 0):
    """Matrix-multiply bursts of 5-60 ms separated by 0-20 ms idle gaps for ``seconds``."""
    import torch

    a = torch.randn(4096, 4096, device=f"cuda:{device}", dtype=torch.bfloat16)
    b = torch.randn_like(a)
    per_matmul = _timed(lambda: a @ b, f"cuda:{device}", 20)

    def run() -> float:
        rng = random.Random(seed)
        begin = time.perf_counter()
        while time.perf_counter() - begin < seconds:
            for _ in range(max(1, round(rng.uniform(0.005, 0.06) / per_matmul))):
                a @ b
            torch.cuda.synchronize(device)
            time.sleep(rng.uniform(0.0, 0.02))
        return time.perf_counter() - begin

    return run


def simulated_self_check() -> dict:
    """The energy steps against a simulated H100 in virtual time: checks this installation's code,
    measures no hardware."""
    from harness.energy import make_energy_meter
    from harness.energy.simloads import llm_like_load
    from harness.energy.simulated import SimClock, SimGPU, SimulatedNVML

    clock = SimClock(100.0)
    gpu = SimGPU(clock)
    rng = random.Random(0)
    with make_energy_meter({"host": False}, [0], nvml=SimulatedNVML([gpu], clock), clock=clock) as meter:
        m = meter.measure("bursty 12 s", lambda: gpu.run(llm_like_load(rng, 12.0)))
        window = meter.start_window("window")
        truth = gpu.run(llm_like_load(rng, 12.0))
        free = meter.stop_window(window)
    r = m.reading
    return {"simulated": True, "counter_error": _rel(r.energy_j, m.result), "error_bound": r.error_bound,
            "polled_vs_counter": r.cross_check_diff, "free_window_error": _rel(free.energy_j, truth),
            "update_period_s": r.update_period_s, "mode": r.mode}


def sampler_overhead(pair, rounds: int, prompts: int, max_new: int, use_nvml: bool, log) -> dict:
    """Tokens/s with the 50 Hz sampler ÷ without, in interleaved rounds (order alternating), ratio of
    totals with a bootstrap 95 % interval over rounds."""
    from harness.decoders import build_decoder
    from harness.energy import NullMeter, make_energy_meter
    from harness.energy.sampler import RealClock
    from harness.energy.simulated import SimGPU, SimulatedNVML

    decoder = build_decoder("ar_greedy", pair)
    tok = pair.tokenizer
    texts = ["In the beginning God created", "And the earth was without form", "Blessed are the meek",
             "The LORD is my shepherd", "Let there be light"]
    ids = [tok(t)["input_ids"] for t in texts[:prompts]]
    decoder.generate(ids[0], 4)
    cfg = {"protocol": False, "idle_baseline_s": 0.0, "infer_update_period_s": 0.0, "host": False}

    def on_meter():
        if use_nvml:
            return make_energy_meter(cfg, pair.cuda_devices())
        clock = RealClock()
        return make_energy_meter(cfg, [0], nvml=SimulatedNVML([SimGPU(clock)], clock), clock=clock)

    per_round = {"off": [], "on": []}
    for r in range(rounds):
        for arm in (("off", "on") if r % 2 == 0 else ("on", "off")):
            meter = on_meter() if arm == "on" else NullMeter("sampler off")
            tokens = seconds = 0
            for i, p in enumerate(ids):
                g = meter.measure("p", lambda p=p: decoder.generate(p, max_new, seed=i)).result
                tokens, seconds = tokens + g.stats.new_tokens, seconds + g.stats.wall_time_s
            meter.close()
            per_round[arm].append((tokens, seconds))

    def ratio(rs):
        rate = {a: sum(per_round[a][i][0] for i in rs) / sum(per_round[a][i][1] for i in rs) for a in per_round}
        return rate["on"] / rate["off"]

    rng = random.Random(0)
    boot = sorted(ratio([rng.randrange(rounds) for _ in range(rounds)]) for _ in range(1000))
    value = ratio(list(range(rounds)))
    log(f"  sampler on ÷ off: {value:.4f} [{boot[24]:.4f}, {boot[974]:.4f}] ({'NVML' if use_nvml else 'simulated NVML'})")
    return {"ratio_on_off": value, "ci95": [boot[24], boot[974]], "rounds": rounds, "prompts_per_round": prompts,
            "max_new_tokens": max_new, "polled": "nvml" if use_nvml else "simulated NVML (CPU: no GPU to poll)",
            "goal": ">= 0.99"}


def run_checks(args, log=print) -> dict:
    import torch

    from harness.models import load_pair

    cuda = torch.cuda.is_available()
    device = f"cuda:{args.device}" if cuda else "cpu"
    result = {"started": time.strftime("%Y-%m-%d %H:%M:%S"), "host": platform.node(), "torch": torch.__version__,
              "device": torch.cuda.get_device_name(args.device) if cuda else "cpu", "not_measured": {}}
    log(f"harness-gpu-check on {result['device']}")
    log("1-4. energy: probe, counter vs polled, update periods, idle")
    if cuda:
        result["energy"] = energy_steps(args.device, args.seconds, log)
    else:
        why = "no CUDA GPU: NVML power/energy cannot be measured on this machine"
        result["energy"] = _not_measured(why)
        result["energy"]["simulated_self_check"] = simulated_self_check()
        result["not_measured"]["energy (probe, counter vs polled, update periods, idle)"] = why
        log(f"  not measured: {why}; the energy code was exercised on a simulated GPU instead")
    log("5. sampler overhead (tiny pair)")
    pair = load_pair("tiny/target", "tiny/draft", device=device)
    result["sampler_overhead"] = sampler_overhead(pair, args.rounds, 3, args.max_new_tokens, cuda, log)
    if not cuda:
        result["not_measured"]["sampler overhead against NVML"] = "no GPU: the sampler polled a simulated NVML"
    log("6-7. cost curves")
    ks = list(range(1, args.max_k + 1)) if cuda else [k for k in (1, 2, 4, 8, 16, 32, 64) if k <= args.max_k]
    pairs = {"tiny (embedded)": lambda: (pair.target, pair.draft, "float32")}
    if cuda:
        dtype_of = {"float16": torch.float16, "bfloat16": torch.bfloat16}
        for name, (t_spec, d_spec, dt) in SEED_PAIRS.items():
            if args.shapes != "all" and name not in args.shapes.split(","):
                continue
            pairs[name] = (lambda t=t_spec, d=d_spec, dt=dt: (synthetic_model(t, dtype_of[dt], device),
                                                              synthetic_model(d, dtype_of[dt], device), dt))
    else:
        pairs["tiny synthetic (random weights)"] = lambda: (synthetic_model(TINY_SYNTHETIC[0], torch.float32, "cpu"),
                                                            synthetic_model(TINY_SYNTHETIC[1], torch.float32, "cpu"),
                                                            "float32")
        result["not_measured"]["seed-shaped models (7B/8B/13B)"] = "GPU only: too large to time on a CPU"
        result["not_measured"]["HBM roofline"] = "GPU only"
    result["cost_curves"] = cost_curves(pairs, ks, device, args.reps, log)
    if cuda and "llama2-7b/68m" in result["cost_curves"] and "ar_tokens_per_s" in result["cost_curves"]["llama2-7b/68m"]:
        entry = result["cost_curves"]["llama2-7b/68m"]
        measured = copy_bandwidth_gbs(device)
        nominal = next((v for k, v in NOMINAL_BANDWIDTH_GBS.items() if k in result["device"]), math.nan)
        result["roofline_7b"] = {
            "ar_tokens_per_s": entry["ar_tokens_per_s"], "weight_bytes": entry["weight_bytes"],
            "copy_bandwidth_gbs": measured, "nominal_bandwidth_gbs": nominal,
            "roofline_tokens_per_s_measured_bw": measured * 1e9 / entry["weight_bytes"],
            "roofline_tokens_per_s_nominal_bw": nominal * 1e9 / entry["weight_bytes"],
            "fraction_of_roofline": entry["ar_tokens_per_s"] / (measured * 1e9 / entry["weight_bytes"])}
    result["finished"] = time.strftime("%Y-%m-%d %H:%M:%S")
    return result


def _fmt(x, digits: int = 3) -> str:
    return "n/a" if x is None or (isinstance(x, float) and not math.isfinite(x)) else (
        f"{x:.{digits}f}" if isinstance(x, float) else str(x))


def render_markdown(result: dict) -> str:
    lines = [f"# harness-gpu-check — {result['device']}", "", f"{result['started']} → {result.get('finished')}, "
             f"torch {result['torch']}, host {result['host']}", ""]
    if result["not_measured"]:
        lines += ["## Not measured here", ""] + [f"- **{k}**: {v}" for k, v in result["not_measured"].items()] + [""]
    energy = result["energy"]
    lines += ["## Energy", ""]
    if energy.get("measured") is False:
        lines.append(f"Not measured: {energy['why']}.")
        sc = energy.get("simulated_self_check")
        if sc:
            lines.append(f"Simulated self-check (virtual time, no hardware): counter error {_fmt(100 * sc['counter_error'])} % "
                         f"(bound {_fmt(100 * sc['error_bound'])} %), polled vs counter {_fmt(100 * sc['polled_vs_counter'])} %.")
    else:
        cvp = energy.get("counter_vs_polled", {})
        lines += [f"- counter {_fmt(cvp.get('counter_j'), 1)} J, polled {_fmt(cvp.get('polled_j'), 1)} J: "
                  f"{_fmt(100 * cvp.get('polled_vs_counter', math.nan), 2)} % (goal ≤ 5 %); naive 1 Hz sum "
                  f"{_fmt(100 * cvp.get('naive_vs_counter', math.nan), 1)} %",
                  f"- idle: {', '.join(f'{k} {_fmt(v, 1)} W' for k, v in energy.get('idle_w', {}).items())}", "",
                  "| GPU | source | profile | inferred update (s) | profile (s) | agrees |", "|---|---|---|---|---|---|"]
        lines += [f"| {r['gpu']} | {r['source']} | {r['profile']} | {_fmt(r['inferred_update_s'], 4)} | "
                  f"{_fmt(r['profile_update_s'], 4)} | {r['agrees']} |" for r in energy.get("profile_check", [])]
    so = result["sampler_overhead"]
    lines += ["", "## Sampler overhead", "", f"tokens/s with the 50 Hz sampler ÷ without: **{so['ratio_on_off']:.4f}** "
              f"(95 % CI {so['ci95'][0]:.4f}-{so['ci95'][1]:.4f}, {so['rounds']} interleaved rounds; polling "
              f"{so['polled']}; goal ≥ 0.99)", "", "## Cost curves", "",
              "| pair | dtype | c = draft ÷ target step | k=2 | k=4 | k=8 | k=16 | k=32 | k=64 (× k=1) |",
              "|---|---|---|---|---|---|---|---|---|"]
    for name, e in result["cost_curves"].items():
        if e.get("measured") is False:
            lines.append(f"| {name} | | not measured: {e['why']} | | | | | | |")
            continue
        ratio = e["verification"]["ratio_to_k1"]
        lines.append(f"| {name} | {e['dtype']} | {_fmt(e['c_draft_over_target'])} | " + " | ".join(
            _fmt(ratio.get(k, ratio.get(str(k))), 2) for k in (2, 4, 8, 16, 32, 64)) + " |")
    if "roofline_7b" in result:
        r = result["roofline_7b"]
        lines += ["", "## AR decoding vs HBM roofline (Llama-2-7B shape)", "",
                  f"{_fmt(r['ar_tokens_per_s'], 1)} tokens/s; roofline {_fmt(r['roofline_tokens_per_s_measured_bw'], 1)} "
                  f"tokens/s at the measured copy bandwidth {_fmt(r['copy_bandwidth_gbs'], 0)} GB/s "
                  f"({_fmt(100 * r['fraction_of_roofline'], 1)} %), {_fmt(r['roofline_tokens_per_s_nominal_bw'], 1)} at "
                  f"the nominal {_fmt(r['nominal_bandwidth_gbs'], 0)} GB/s"]
    return "\n".join(lines) + "\n"


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(prog="harness-gpu-check", description=__doc__.split("\n\n")[0])
    parser.add_argument("--out", default="gpu_check", help="folder for gpu_check.json and gpu_check.md")
    parser.add_argument("--device", type=int, default=0, help="CUDA device index")
    parser.add_argument("--seconds", type=float, default=12.0, help="length of the bursty energy workload (≥ 10)")
    parser.add_argument("--rounds", type=int, default=20, help="interleaved rounds of the sampler-overhead check")
    parser.add_argument("--max-new-tokens", type=int, default=32)
    parser.add_argument("--max-k", type=int, default=64, help="largest verification length k")
    parser.add_argument("--reps", type=int, default=10, help="timed repetitions per forward call")
    parser.add_argument("--shapes", default="all", help="seed pairs to build on a GPU: all, or a comma list of "
                                                        + ", ".join(SEED_PAIRS))
    parser.add_argument("--quick", action="store_true", help="fewer rounds and repetitions (smoke test)")
    args = parser.parse_args(argv)
    if args.quick:
        args.rounds, args.reps, args.max_new_tokens, args.max_k = 2, 2, 8, min(args.max_k, 8)
    result = run_checks(args)
    out = Path(args.out)
    out.mkdir(parents=True, exist_ok=True)
    (out / "gpu_check.json").write_text(json.dumps(result, indent=2, default=str))
    (out / "gpu_check.md").write_text(render_markdown(result))
    print(f"wrote {out / 'gpu_check.json'} and {out / 'gpu_check.md'}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
