"""Synthetic results folders for the report's tests: cells written as the runner writes them (``summary.json``
with ``method_name``, ``decoding``, ``params``, ``config``; ``records.jsonl``), with known timings and metrics."""
from __future__ import annotations

import json
from pathlib import Path

GREEDY = {"name": "greedy", "temperature": 0.0, "top_k": 0, "top_p": 1.0}
SAMPLING = {"name": "sampling", "temperature": 1.0, "top_k": 20, "top_p": 0.9}


def write_cell(results: Path, cell_id: str, method: str, params: dict | None = None, *, decoding: dict = SAMPLING,
               pair: str = "tiny", dataset: str = "d", gpu: str = "cpu", seed: int = 0, prompts: int = 12,
               secs: float = 1.0, metrics: dict | None = None, ppl: float = 2.0, gamma: int | None = None,
               accept: int = 2, report: dict | None = None, summary: dict | None = None, pair_cfg: dict | None = None,
               record_extra=None, jpt: float | None = None, max_new_tokens: int = 16) -> str:
    """One finished cell. Per prompt i: 10 tokens in ``secs`` × (1 + i/20) s; ``metrics`` {name: value or
    callable(i)}; rounds of depth ``gamma`` committing ``accept`` tokens; ``record_extra(i)`` adds fields."""
    params = dict(params or {})
    kind = "greedy" if decoding["temperature"] == 0 else "sampling"
    warp = {} if method in ("ar_greedy", "beam_search") else {k: decoding[k] for k in ("temperature", "top_k", "top_p")}
    all_params = {**warp, **params}
    cfg = {"method": {"name": method, **all_params}, "decoding": dict(decoding),
           "pair": {"name": pair, "target": "tiny/target", "draft": "tiny/draft", **(pair_cfg or {})},
           "dataset": {"name": dataset, "num_prompts": prompts}, "gpu": {"name": gpu}, "seed": seed,
           "max_new_tokens": max_new_tokens, "report": report or {"baselines": {"greedy": None, "sampling": None},
                                                                    "iso": [], "tables": []}}
    records = []
    for i in range(prompts):
        r = {"cell_id": cell_id, "index": i, "example_id": f"q{i}", "new_tokens": 10,
             "wall_time_s": secs * (1 + i / 20), "target_calls": 10, "draft_calls": 0, "rounds": 0,
             "accept_lengths": [], "round_gammas": [], "accepted_tokens": 0, "draft_positions": 0, "draft_nodes": 0,
             "output_ppl": ppl, "energy.j_per_token": jpt}
        if gamma:
            n = 10 // accept
            r.update(rounds=n, accept_lengths=[accept] * n, round_gammas=[gamma] * n, target_calls=n,
                     accepted_tokens=(accept - 1) * n, draft_positions=gamma * n, draft_nodes=gamma * n,
                     draft_calls=gamma * n)
        for name, v in (metrics or {}).items():
            r[f"metric.{name}"] = v(i) if callable(v) else v
        r.update(record_extra(i) if record_extra else {})
        records.append(r)
    d = Path(results) / "cells" / cell_id
    d.mkdir(parents=True, exist_ok=True)
    (d / "records.jsonl").write_text("".join(json.dumps(r) + "\n" for r in records))
    s = {"cell_id": cell_id, "status": "done", "prompts": prompts, "method_name": method, "decoding": kind,
         "params": all_params, "config": cfg, "max_new_tokens": max_new_tokens, "interleaved": True,
         "tokens_per_s": sum(r["new_tokens"] for r in records) / sum(r["wall_time_s"] for r in records),
         "env": {"device_type": "cpu"}, **(summary or {})}
    (d / "summary.json").write_text(json.dumps(s))
    return cell_id


def compose_twin(name: str) -> list[dict]:
    """Every cell config of an experiment (``+experiment=name``, gpu=cpu), composed by Hydra as a sweep would."""
    from hydra import compose, initialize_config_dir
    from hydra.core.global_hydra import GlobalHydra
    from omegaconf import OmegaConf

    from harness.config.groups import register_configs
    from harness.resources import conf_dir
    from harness.run.sweeper import config_sweep_overrides

    GlobalHydra.instance().clear()
    register_configs()
    with initialize_config_dir(config_dir=str(conf_dir()), version_base="1.3"):
        sweep = compose(config_name="config", overrides=[f"+experiment={name}"], return_hydra_config=True)
        cells = config_sweep_overrides(sweep)
        out = [OmegaConf.to_container(compose(config_name="config", overrides=[f"+experiment={name}", "gpu=cpu", *c]),
                                      resolve=True) for c in cells]
    GlobalHydra.instance().clear()
    return out


def write_composed(results: Path, cfg: dict, secs: float = 1.0, prompts: int | None = None, **extra) -> str:
    """A finished cell as the runner would write it for a composed config (no model runs): the decoder's
    parameters and decoding from the Params, the cell id from the identity, records with synthetic timings
    (per prompt ``secs`` × (1 + i/20) s), drafting rounds where the method drafts, DSBD's width and β̄
    stats, draft selection's phases (the first ``selection_fit_prompts`` prompts: fit), and a decision model's
    per-round predictions (``stat.decision_predictions``: the first check's token accepted, the others rejected)."""
    from harness.config.identity import IDENTITY_VERSION, VERSION_KEY, cell_id
    from harness.run.runner import plan_cell

    plan = plan_cell(cfg)
    values = plan.method.params_dict()
    cid = cell_id(cfg)
    n = prompts or cfg["dataset"].get("num_prompts") or 4
    gamma = values.get("gamma") or (len(values["k_config"]) - 1 if values.get("k_config") else None)
    fit = values.get("selection_fit_prompts", 0) if values.get("draft_selection", "none") != "none" else 0

    def rec(i):
        r = {"stat.avg_width": 1.0 + (values.get("draft_width") or 0) / 10, "stat.beta_bar": 0.8,
             "stat.beta_layers": 4} if plan.decoder_cls.method == "dsbd" else {}
        if fit:
            r["selection.phase"] = "fit" if i < fit else "select"
        if values.get("decision_model") and gamma:  # every round: checks 1..γ−1, the first judging an accepted token
            r["stat.decision_predictions"] = [[0.85 + 0.01 * (i % 3)] + [0.45, 0.35, 0.15, 0.05][:gamma - 2]
                                              for _ in range(10 // 2)]
            r["stat.decision_lookahead"] = 0
        return r

    d = Path(results) / "cells" / cid
    write_cell(results, cid, plan.decoder_cls.method, {k: v for k, v in values.items()
                                                        if k not in ("temperature", "top_k", "top_p")},
               decoding=cfg["decoding"], pair=cfg["pair"]["name"], dataset=cfg["dataset"]["name"],
               prompts=n, secs=secs, gamma=gamma if plan.decoder_cls.method not in ("ar_greedy", "ar_sampling",
                                                                                  "beam_sampling", "beam_search")
               else None, report=cfg.get("report"), pair_cfg={k: v for k, v in cfg["pair"].items() if k != "name"},
               record_extra=rec, max_new_tokens=cfg.get("max_new_tokens") or 16, **extra)
    assert d.is_dir()
    summary = json.loads((d / "summary.json").read_text())
    summary.update(decoding=plan.method.params.decoding, params=values, config=cfg, lossless=_lossless(plan),
                   **{VERSION_KEY: IDENTITY_VERSION})  # the id above is this version's
    (d / "summary.json").write_text(json.dumps(summary))
    return cid


def _lossless(plan) -> bool:
    """The decoder's own ``is_lossless`` for the cell's Params (what the runner records), without loading models."""
    from types import SimpleNamespace

    cls = plan.decoder_cls
    me = SimpleNamespace(lossless=cls.lossless, lossless_when_greedy=cls.lossless_when_greedy,
                         decoding=plan.method.params.decoding, params=plan.method.params)
    return bool(cls.is_lossless(me))
