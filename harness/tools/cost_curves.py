"""The cost curves that decide speculative speed-ups, for ``harness-gpu-check``: forward time of a
k-token verification call ÷ a 1-token call (KV cache of a prefix) for each target, the draft ÷
target cost c of one cached step — on synthetic models with random weights built from config
(``AutoModelForCausalLM.from_config``, no download) in the shapes of the papers' pairs, and on the
embedded tiny pair — and AR decoding against the HBM roofline. Models are called through
:class:`harness.primitives.forward.CountedModel`, the one place that knows how a model takes its KV
cache (``cache`` in current transformers; ``past_key_values`` is deprecated)."""
from __future__ import annotations

import math
import statistics
import time

from harness.primitives.random_pair import LLAMA2_7B  # the seeds' 7B shape, one definition: random pairs build it too

# The seeds' pairs (GUIDE §1), as configs: random weights, no download. Figures from the models' public configs.
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


def _counted(model):
    from harness.primitives.forward import CountedModel

    return CountedModel(model, model.config.vocab_size)


def verification_curve(model, ks: list[int], prefix: int, device, reps: int) -> dict:
    """Forward time of a k-token call on a KV cache of ``prefix`` tokens, for each k, and ÷ k=1."""
    import torch

    from harness.primitives.kv_cache import new_cache, truncate

    forward = _counted(model)
    gen = torch.Generator().manual_seed(0)
    ids = torch.randint(0, model.config.vocab_size, (1, prefix + max(ks)), generator=gen).to(device)
    cache = new_cache(model)
    with torch.inference_mode():
        forward(ids[:, :prefix], cache)
        seconds = {}
        for k in ks:
            def call(k=k):
                forward(ids[:, prefix:prefix + k], cache)
                truncate(cache, prefix)
            seconds[k] = _timed(call, device, reps)
    ratios = {k: s / seconds[ks[0]] for k, s in seconds.items()}
    return {"prefix_tokens": prefix, "seconds": seconds, "ratio_to_k1": ratios}


def ar_tokens_per_s(model, device, tokens: int = 64, prefix: int = 32, warmup: int = 8,
                    clock=time.perf_counter) -> float:
    """Greedy one-token steps with a KV cache (the AR baseline's inner loop), tokens per second, after ``warmup``
    untimed steps on the same cache (issue 28 item 4).

    Why the loop used to show 4 % of the roofline, five times slower than its own k = 1 forward (the verification
    curve's median call): the loop had no warm-up, so its timed window held every first-time cost of decoding — the
    first one-token steps' kernels (CUDA loads modules lazily, cuBLAS picks and allocates for the M = 1 shapes),
    and the caching allocator's growth for a KV cache that reallocates each layer's keys and values at every step
    (DynamicCache concatenates; the verification curve crops one 128-token cache back and reuses its blocks).
    A median of timed calls hides such costs; a 64-token loop averages them in. The loop itself never waits for
    the device (the next token stays there), so what remains after the warm-up is the eager forward's own cost;
    :func:`ar_step_profile` splits it into host (launch) time and device time, step by step, to tell which one
    bounds it on a given GPU.
    """
    import torch

    from harness.primitives.kv_cache import new_cache

    forward = _counted(model)
    ids = torch.randint(0, model.config.vocab_size, (1, prefix), generator=torch.Generator().manual_seed(1)).to(device)
    with torch.inference_mode():
        cache = new_cache(model)
        nxt = forward(ids, cache, keep=1).argmax(-1)
        for _ in range(warmup):  # untimed: first-time kernels, shapes and allocations
            nxt = forward(nxt, cache, keep=1).argmax(-1)
        _sync(device)
        start = clock()
        for _ in range(tokens):
            nxt = forward(nxt, cache, keep=1).argmax(-1)
        _sync(device)
    return tokens / (clock() - start)


def ar_step_profile(model, device, tokens: int = 32, prefix: int = 32, warmup: int = 8) -> dict:
    """Per-step seconds of the same loop, each step synchronised: ``first`` (the first step after the prefill, no
    warm-up), then after ``warmup`` steps the ``median``/``mean``/``max`` step and ``host_median`` (the host's own
    time to issue one step, before waiting for the device). ``host_median`` ≈ ``median``: launch-bound (the host is
    the bottleneck, e.g. eager kernel launches); ``host_median`` ≪ ``median``: the device bounds the step."""

    import torch

    from harness.primitives.kv_cache import new_cache

    forward = _counted(model)
    ids = torch.randint(0, model.config.vocab_size, (1, prefix), generator=torch.Generator().manual_seed(1)).to(device)
    steps, host = [], []
    with torch.inference_mode():
        cache = new_cache(model)
        nxt = forward(ids, cache, keep=1).argmax(-1)
        for i in range(warmup + tokens):
            _sync(device)
            start = time.perf_counter()
            nxt = forward(nxt, cache, keep=1).argmax(-1)
            issued = time.perf_counter()
            _sync(device)
            if i == 0 or i >= warmup:
                steps.append(time.perf_counter() - start)
                host.append(issued - start)
    first, timed, host = steps[0], steps[1:], host[1:]
    return {"first_s": first, "median_s": statistics.median(timed), "mean_s": statistics.fmean(timed),
            "max_s": max(timed), "host_median_s": statistics.median(host), "warmup_steps": warmup}


def copy_bandwidth_gbs(device, gib: float = 1.0) -> float:
    """Device memory bandwidth from a large device-to-device copy (read + write bytes ÷ time)."""
    import torch

    n = int(gib * 2**30) // 4
    a = torch.empty(n, dtype=torch.float32, device=device)
    b = torch.empty_like(a)
    seconds = _timed(lambda: b.copy_(a), device, 10)
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
        except Exception as e:  # noqa: BLE001 — out of memory, or a shape this transformers cannot build: recorded
            out[name] = {"measured": False, "why": f"could not build: {type(e).__name__}: {e}"}
            continue
        curve = verification_curve(target, ks, 128 if str(device).startswith("cuda") else 32, device, reps)
        entry = {"dtype": dtype, "target_params": sum(p.numel() for p in target.parameters()),
                 "draft_params": sum(p.numel() for p in draft.parameters()), "verification": curve}
        draft_step = verification_curve(draft, [1], curve["prefix_tokens"], device, reps)["seconds"][1]
        entry["draft_step_s"], entry["target_step_s"] = draft_step, curve["seconds"][ks[0]]
        entry["c_draft_over_target"] = draft_step / curve["seconds"][ks[0]]
        if name == "llama2-7b/68m" and str(device).startswith("cuda"):
            entry["ar_tokens_per_s"] = ar_tokens_per_s(target, device)
            entry["ar_steps"] = ar_step_profile(target, device)
            entry["weight_bytes"] = weight_bytes(target)
        entry["seconds_to_measure"] = time.perf_counter() - started
        out[name] = entry
        log(f"  {name}: c = {entry['c_draft_over_target']:.3f}, k={max(ks)}/k=1 = "
            f"{curve['ratio_to_k1'].get(max(ks), math.nan):.2f} ({entry['seconds_to_measure']:.0f} s)")
        del target, draft
        if str(device).startswith("cuda"):
            torch.cuda.empty_cache()
    return out

