"""HF parity of the harness (issue 28.2/28.5): our ``ar`` against transformers' ``generate``, our ``sd`` against HF
assisted generation (``hf_assisted``, γ tokens per round, constant schedule) at the same γ — same weights, same
prompts, greedy, the arms interleaved prompt by prompt (the order rotating), each of ours in both execution modes.
Ratios are ratios of totals (tokens ÷ seconds) with a percentile bootstrap CI over prompts
(:mod:`harness.analysis.stats`). With ``roofline``: the target's weight bytes and the device's copy bandwidth,
hence the memory roofline of one-token decoding (tokens/s = bandwidth ÷ bytes read per token, the weights; the KV
cache of a short generation is a rounding error) and each AR arm's fraction of it."""
from __future__ import annotations

import time
from typing import Any

import torch


def load_named_pair(name: str):
    """The pair of ``conf/pair/<name>.yaml`` (random shapes are built on the device; no download)."""
    import yaml

    from harness.models import load_pair
    from harness.resources import conf_dir

    cfg = yaml.safe_load((conf_dir() / "pair" / f"{name}.yaml").read_text())
    cfg = {k: v for k, v in cfg.items() if k != "defaults"}
    return load_pair(cfg.pop("target"), cfg.pop("draft", None), progress=False, **cfg)


def prompts_of(pair, n: int) -> list[list[int]]:
    from harness.tasks import load_task

    task = load_task({"task": "text_continuation", "name": "kjv_heldout", "num_prompts": n, "prompt_words": 20})
    return [pair.tokenizer(ex.prompt)["input_ids"] for ex in task.examples()]


class HFGenerate:
    """transformers' ``generate`` (greedy) timed like a decoder: (new tokens, seconds)."""

    def __init__(self, pair):
        self.model, self.pad = pair.target, pair.tokenizer.pad_token_id

    def __call__(self, ids: list[int], new_tokens: int) -> tuple[int, float]:
        from harness.primitives.forward import synchronize

        x = torch.tensor([ids], device=self.model.device)
        synchronize(x.device)
        start = time.perf_counter()
        with torch.inference_mode():
            out = self.model.generate(x, attention_mask=torch.ones_like(x), max_new_tokens=new_tokens, do_sample=False,
                                      pad_token_id=self.pad)
        synchronize(x.device)
        return int(out.shape[1] - x.shape[1]), time.perf_counter() - start


def _arms(pair, gamma: int) -> dict:
    """name -> (execution mode or None, callable(ids, n) -> (tokens, seconds))."""
    from harness.methods import build_decoder

    def ours(method, **params):
        decoder = build_decoder(method, pair, decoding="greedy", **params)

        def call(ids, n):
            st = decoder.generate(ids, n, seed=0).stats
            return st.new_tokens, st.wall_time_s
        return call
    arms = {f"ar/{m}": (m, ours("ar_greedy")) for m in ("eager", "graphs")}
    arms["hf_generate"] = ("eager", HFGenerate(pair))
    arms.update({f"sd/{m}": (m, ours("sd", gamma=gamma)) for m in ("eager", "graphs")})
    if pair.draft is not None:
        arms["hf_assisted"] = ("eager", ours("hf_assisted", gamma=gamma))
    return arms


def parity(pair: str, prompts: int, new_tokens: int, gamma: int, roofline: bool = False) -> dict:
    """The parity figures of one pair (module docstring)."""
    from harness.analysis.stats import estimate, ratio_of_totals

    p = load_named_pair(pair)
    ids = prompts_of(p, prompts)
    arms = _arms(p, gamma)
    for mode, call in arms.values():  # warm-up (untimed): allocator, cuBLAS, the graphs' first captures
        p.set_execution(mode)
        call(ids[0], min(8, new_tokens))
    rows: dict[str, tuple[list[int], list[float]]] = {k: ([], []) for k in arms}
    names = list(arms)
    for i, x in enumerate(ids):
        for name in names[i % len(names):] + names[:i % len(names)]:
            mode, call = arms[name]
            p.set_execution(mode)
            tokens, seconds = call(x, new_tokens)
            rows[name][0].append(tokens)
            rows[name][1].append(seconds)
    p.set_execution("eager")
    out: dict[str, Any] = {"pair": pair, "prompts": len(ids), "new_tokens": new_tokens, "gamma": gamma,
           "tokens_per_s": {k: sum(t) / sum(s) for k, (t, s) in rows.items()}, "ratios": {}}
    for mine, theirs in (("ar/eager", "hf_generate"), ("ar/graphs", "hf_generate"), ("sd/eager", "hf_assisted"),
                         ("sd/graphs", "hf_assisted")):
        if theirs in rows:
            point, lo, hi = estimate((*rows[mine], *rows[theirs]), ratio_of_totals)
            out["ratios"][f"{mine} ÷ {theirs}"] = {"ratio": point, "lo": lo, "hi": hi}
    if roofline:
        out["roofline"] = _roofline(p, out["tokens_per_s"])
    return out


def _roofline(pair, tokens_per_s: dict) -> dict:
    from harness.tools.cost_curves import copy_bandwidth_gbs, weight_bytes

    device = pair.target.device
    bandwidth = copy_bandwidth_gbs(device, gib=1.0 if device.type == "cuda" else 0.05)
    roof = bandwidth * 1e9 / weight_bytes(pair.target)
    return {"copy_bandwidth_gbs": bandwidth, "weight_bytes": weight_bytes(pair.target), "roofline_tokens_per_s": roof,
            "ar_fraction": {m: tokens_per_s[f"ar/{m}"] / roof for m in ("eager", "graphs")}}
