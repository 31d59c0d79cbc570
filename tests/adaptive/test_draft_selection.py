"""Draft-model selection (seed 004 §5) on synthetic prompts with a known best draft."""
from __future__ import annotations

import math

import numpy as np
import pytest

from harness.adaptive import estimators as est
from harness.adaptive.draft_selection import (AlphaModel, DraftSelector, PromptFeaturizer, alpha_from_record,
                                              expected_throughput, larger_draft_wins, tfidf_matrix,
                                              theorem2_as_printed, throughput_eq3)
from harness.errors import ConfigError


def test_tfidf_matches_the_textbook_definition():
    docs = [[1, 1, 2], [2, 3], [3, 3, 3, 4]]
    x, vocab, idf = tfidf_matrix(docs)
    assert vocab == {1: 0, 2: 1, 3: 2, 4: 3}
    assert idf[0] == pytest.approx(math.log(4 / 2) + 1) and idf[2] == pytest.approx(math.log(4 / 3) + 1)
    row = np.array([2 * idf[0], idf[1], 0, 0])
    assert x[0] == pytest.approx(row / np.linalg.norm(row))
    assert np.linalg.norm(x, axis=1) == pytest.approx(np.ones(3))
    y = tfidf_matrix([[1, 99]], vocab, idf)[0]  # unseen terms are ignored
    assert y[0] == pytest.approx([1, 0, 0, 0])


def test_featurizer_layout_and_errors():
    rng = np.random.default_rng(0)
    docs = [list(rng.integers(0, 50, size=rng.integers(5, 40))) for _ in range(30)]
    ppls = list(rng.uniform(5, 60, size=30))
    f = PromptFeaturizer(dim=8).fit(docs, ppls)
    u = f.transform(docs[0], ppls[0])
    assert u.shape == (8,) and u[0] == 1.0
    us = np.stack([f.transform(d, p) for d, p in zip(docs, ppls)])
    assert us[:, 1].mean() == pytest.approx(0, abs=1e-9) and us[:, 2].std() == pytest.approx(1)  # z-scores
    with pytest.raises(ConfigError, match="dimension"):
        PromptFeaturizer(dim=2)
    with pytest.raises(ValueError, match="perplexity"):
        f.transform(docs[0], float("nan"))


def test_ols_recovers_eq8_and_reports_r2():
    rng = np.random.default_rng(1)
    u = np.column_stack([np.ones(25), rng.normal(size=(25, 7))])
    z = np.array([0.6, 0.05, -0.08, 0.02, 0, 0, 0.03, 0])
    alpha = u @ z + rng.normal(0, 0.01, size=25)
    m = AlphaModel.fit(u, alpha)
    assert m.z == pytest.approx(z, abs=0.02)
    assert 0.9 < m.r2_loo < m.r2 <= 1
    ref = np.linalg.solve(u.T @ u, u.T @ alpha)  # §5's (Σ b bᵀ)⁻¹ Σ b α
    assert m.z == pytest.approx(ref)


def test_expected_throughput_is_eq1_and_eq3():
    for alpha, c, g in [(0.6, 0.17, 3), (0.8, 0.3, 5), (0.3, 0.05, 1)]:
        thr, gg = expected_throughput(alpha, c, gamma=g)
        assert gg == g
        assert thr == pytest.approx(est.objective(alpha, g, c, 1.0))
        assert throughput_eq3(128, alpha, c, g) == pytest.approx(thr)  # R = L / t, in units of a target step
    thr_best, g_best = expected_throughput(0.8, 0.1)
    assert g_best == est.best_gamma(0.8, 0.1, lambda g: 1.0, 1, 8)
    assert thr_best >= max(expected_throughput(0.8, 0.1, gamma=g)[0] for g in range(1, 9))


def test_theorem2_exact_agrees_with_eq3_and_the_printed_form_does_not_always():
    rng = np.random.default_rng(2)
    disagreements = 0
    for _ in range(300):
        a_s, a_l = sorted(rng.uniform(0.2, 0.95, size=2))
        c_s, c_l = sorted(rng.uniform(0.02, 0.6, size=2))
        g = int(rng.integers(1, 8))
        exact = larger_draft_wins((a_s, c_s), (a_l, c_l), gamma=g)
        assert exact == (expected_throughput(a_l, c_l, gamma=g)[0] > expected_throughput(a_s, c_s, gamma=g)[0])
        disagreements += exact != theorem2_as_printed((a_s, c_s), (a_l, c_l), gamma=g)
    assert disagreements > 0  # Eq. 7 as printed is not Theorem 2's conclusion from Eq. 3


def _world(seed=3, n=200):
    """Prompts whose 'code-likeness' t (a TF-IDF direction) and perplexity drive α: the large draft
    gains most on hard prompts, so the best draft changes with the prompt."""
    rng = np.random.default_rng(seed)
    prompts = []
    for _ in range(n):
        code = rng.random() < 0.5
        doc = list(rng.integers(0, 30, size=rng.integers(8, 30)) + (100 if code else 0))
        ppl = float(np.exp(rng.normal(3.0 if code else 3.6, 0.2)))
        prompts.append((doc, ppl, code))
    true_alpha = {"small": lambda code, ppl: (0.85 if code else 0.45) - 0.02 * (math.log(ppl) - 3.3),
                  "large": lambda code, ppl: (0.88 if code else 0.70) - 0.02 * (math.log(ppl) - 3.3)}
    costs = {"small": 0.1, "large": 0.2}
    return prompts, true_alpha, costs, rng


def test_selector_picks_the_best_draft_per_prompt():
    prompts, true_alpha, costs, rng = _world()
    f = PromptFeaturizer(dim=8).fit([p[0] for p in prompts], [p[1] for p in prompts])
    sel = DraftSelector(costs, n_fit=25)
    for doc, ppl, code in prompts[:25]:
        u = f.transform(doc, ppl)
        assert sel.drafts_to_run(u) == ["small", "large"]  # fitting: every draft runs
        for d in costs:
            sel.observe(d, u, true_alpha[d](code, ppl) + rng.normal(0, 0.02))
    assert not sel.fitting
    assert all(r2 > 0.8 for r2, _ in sel.r2().values())
    achieved, best, single = 0.0, 0.0, {d: 0.0 for d in costs}
    for doc, ppl, code in prompts[25:]:
        u = f.transform(doc, ppl)
        choice = sel.choose(u)
        truth = {d: expected_throughput(true_alpha[d](code, ppl), costs[d])[0] for d in costs}
        achieved += truth[choice.draft]
        best += max(truth.values())
        for d in costs:
            single[d] += truth[d]
        assert abs(choice.predicted_alpha["large"] - true_alpha["large"](code, ppl)) < 0.1
    assert achieved > 0.99 * best
    assert achieved > 1.02 * max(single.values())  # beats always using either draft


def test_selector_with_one_dominant_draft_always_picks_it():
    prompts, true_alpha, costs, rng = _world(seed=4, n=60)
    costs = {"small": 0.1, "large": 0.105}  # the large draft barely costs more: always worth it
    f = PromptFeaturizer(dim=6).fit([p[0] for p in prompts], [p[1] for p in prompts])
    sel = DraftSelector(costs, n_fit=25)
    for doc, ppl, code in prompts[:25]:
        for d in costs:
            sel.observe(d, f.transform(doc, ppl), true_alpha[d](code, ppl))
    assert {sel.choose(f.transform(doc, ppl)).draft for doc, ppl, _ in prompts[25:]} == {"large"}


def test_selector_errors_and_alpha_from_record():
    with pytest.raises(ConfigError, match="cost ratio"):
        DraftSelector({"a": 0.0})
    with pytest.raises(ConfigError, match="n_fit"):
        DraftSelector({"a": 0.2}, n_fit=1)
    sel = DraftSelector({"a": 0.2, "b": 0.3})
    with pytest.raises(ConfigError, match="unknown draft"):
        sel.observe("c", np.ones(3), 0.5)
    with pytest.raises(RuntimeError, match="fitting"):
        sel.choose(np.ones(3))
    assert alpha_from_record(30, 10) == 0.75 and math.isnan(alpha_from_record(0, 0))


def test_fixed_gamma_oracle():
    import pandas as pd

    from harness.adaptive.oracle import fixed_gamma_oracle

    rows = []
    # prompt a is fastest at γ=2, prompt b at γ=6; over the dataset γ=4 wins
    speed = {("a", 2): 12, ("a", 4): 10, ("a", 6): 6, ("b", 2): 6, ("b", 4): 10, ("b", 6): 12}
    for (p, g), tps in speed.items():
        rows.append({"dataset": "d", "prompt": p, "gamma": g, "new_tokens": 120, "wall_time_s": 120 / tps})
    per_dataset, per_prompt = fixed_gamma_oracle(pd.DataFrame(rows))
    assert per_dataset.loc[0, "best_gamma"] == 4 and per_dataset.loc[0, "tokens_per_s"] == pytest.approx(10)
    assert dict(zip(per_prompt["prompt"], per_prompt["best_gamma"])) == {"a": 2, "b": 6}
    assert per_dataset.loc[0, "per_prompt_gain"] == pytest.approx(0.2)
    with pytest.raises(ValueError, match="wall_time_s"):
        fixed_gamma_oracle(pd.DataFrame(rows).drop(columns="wall_time_s"))
