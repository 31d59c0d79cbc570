"""Adaptive draft-model selection (adaptive §5), as pure numpy: no model is loaded here.

For each new prompt: a feature vector u (§5 "Prompt Features": length, perplexity, TF-IDF), the
single-token accuracy α̂_c = uᵀ Ẑ_c predicted per draft by the OLS model of Eq. 8 (fitted on the
first r prompts, on which every draft is run), the expected throughput of each draft from
Eq. 1 / Eq. 3 with its measured cost ratio c, and the draft with the highest one — which is
what Theorem 2's condition decides pairwise, written exactly (:func:`larger_draft_wins`).

Features (:class:`PromptFeaturizer`), fitted without labels on the dataset's prompts:
``[1, z(log length), z(log perplexity), k TF-IDF components]`` — the constant lets Eq. 8 have
an intercept; logs because both are skewed; z-scores over the dataset's prompts; TF-IDF over
the prompts' token ids (the target's tokenizer, shared by every draft; smooth idf, L2-normalised
rows, scikit-learn's defaults), reduced to k components by a truncated SVD (LSA) so that the
vector length r stays small (App. C.5 Table 11 tries r = 4..16; default 8) and Eq. 8 is
identifiable from 25 prompts. scikit-learn is not a dependency of the project, so TF-IDF is
written here with numpy (a few lines).

Which perplexity (Eq. 9): the prompt's perplexity under the *cheapest draft* — it must be paid
before decoding starts, for every prompt, and the selection has to cost far less than the few
per cent it can gain; the cheapest draft costs c ≈ 0.15-0.2 of a target prefill on the tiny pair,
the target's own perplexity would cost a whole extra prefill. Compute it with
``harness.metrics.perplexity.output_perplexity(model, ids[:1], ids[1:])`` (Eq. 9: the mean NLL of
tokens 2..N given their prefix, exponentiated; base 2 or e gives the same number).

The realised α of a generation is Eq. 2 without the cap over all its rounds,
accepted ÷ (accepted + rejected rounds) — the exact MLE of the per-token acceptance probability
(:mod:`harness.adaptive.estimators`), computable from any record (``alpha_from_record``).
"""
from __future__ import annotations

import math
from dataclasses import dataclass, field
from typing import Callable, Sequence

import numpy as np

from harness.adaptive import estimators as est
from harness.adaptive.selection_params import DIM, N_FIT
from harness.errors import ConfigError

# ---------------------------------------------------------------------------- features

def tfidf_matrix(docs: Sequence[Sequence[int]], vocab: dict[int, int] | None = None,
                 idf: np.ndarray | None = None) -> tuple[np.ndarray, dict[int, int], np.ndarray]:
    """TF-IDF of token-id documents: tf = counts, idf = ln((1 + n) / (1 + df)) + 1, rows L2-normalised.

    With ``vocab``/``idf`` given (from a fit) it transforms; terms outside ``vocab`` are ignored.
    Returns (matrix (n_docs, n_terms), vocab term → column, idf).
    """
    if vocab is None:
        vocab = {t: i for i, t in enumerate(sorted({int(t) for d in docs for t in d}))}
    tf = np.zeros((len(docs), len(vocab)))
    for r, d in enumerate(docs):
        for t in d:
            col = vocab.get(int(t))
            if col is not None:
                tf[r, col] += 1
    if idf is None:
        df = (tf > 0).sum(axis=0)
        idf = np.log((1 + len(docs)) / (1 + df)) + 1
    x = tf * idf
    norms = np.linalg.norm(x, axis=1, keepdims=True)
    return np.divide(x, norms, out=np.zeros_like(x), where=norms > 0), vocab, idf


@dataclass
class PromptFeaturizer:
    """u ∈ R^r for a prompt: [1, z(log length), z(log ppl), TF-IDF LSA components] (§5)."""

    dim: int = DIM
    vocab: dict[int, int] = field(default_factory=dict)
    idf: np.ndarray | None = None
    components: np.ndarray | None = None
    mean: np.ndarray | None = None
    std: np.ndarray | None = None

    def __post_init__(self):
        if not isinstance(self.dim, int) or not 3 <= self.dim <= 64:
            raise ConfigError(f"feature dimension r = {self.dim!r} out of range; valid: an integer in [3, 64] "
                              "(1 constant + length + perplexity + ≥ 0 TF-IDF components)")

    def fit(self, docs: Sequence[Sequence[int]], ppls: Sequence[float]) -> "PromptFeaturizer":
        """Fit TF-IDF, its SVD and the z-scores on the dataset's prompts (no α needed)."""
        if len(docs) != len(ppls) or len(docs) < 2:
            raise ConfigError(f"need ≥ 2 prompts with a perplexity each to fit features, got {len(docs)} / {len(ppls)}")
        x, self.vocab, self.idf = tfidf_matrix(docs)
        k = min(self.dim - 3, min(x.shape) if x.size else 0)
        self.components = np.linalg.svd(x, full_matrices=False)[2][:k] if k > 0 else np.zeros((0, x.shape[1]))
        raw = np.array([[math.log(max(len(d), 1)), math.log(p)] for d, p in zip(docs, ppls)])
        self.mean, self.std = raw.mean(axis=0), raw.std(axis=0)
        self.std[self.std == 0] = 1.0
        return self

    def transform(self, doc: Sequence[int], ppl: float) -> np.ndarray:
        if self.idf is None:
            raise RuntimeError("PromptFeaturizer.fit() first")
        if not (ppl > 0 and math.isfinite(ppl)):
            raise ValueError(f"prompt perplexity must be a positive finite number, got {ppl}")
        z = (np.array([math.log(max(len(doc), 1)), math.log(ppl)]) - self.mean) / self.std
        tf = tfidf_matrix([doc], self.vocab, self.idf)[0][0]
        lsa = self.components @ tf
        u = np.concatenate([[1.0], z, lsa])
        return np.pad(u, (0, self.dim - u.size))  # fewer prompts/terms than components: zero-padded


# ---------------------------------------------------------------------------- Eq. 8

@dataclass
class AlphaModel:
    """Eq. 8: α = uᵀ Z_c + ε, with Ẑ_c the ordinary least-squares estimate over the fit prompts.

    ``lstsq`` (a pseudo-inverse) equals (Σ b bᵀ)⁻¹ Σ b α when the fit prompts span R^r and stays
    defined when they do not. ``r2`` is the in-sample R²; ``r2_loo`` the leave-one-out
    (PRESS) R², the honest one with 25 prompts and r = 8 parameters.
    """

    z: np.ndarray
    r2: float
    r2_loo: float
    n: int

    @classmethod
    def fit(cls, u: np.ndarray, alpha: np.ndarray) -> "AlphaModel":
        u, alpha = np.asarray(u, dtype=float), np.asarray(alpha, dtype=float)
        z = np.linalg.lstsq(u, alpha, rcond=None)[0]
        resid = alpha - u @ z
        ss_tot = float(np.sum((alpha - alpha.mean()) ** 2))
        hat = np.einsum("ij,ji->i", u, np.linalg.pinv(u))  # leverages h_ii
        loo = resid / np.clip(1 - hat, 1e-9, None)
        r2 = 1 - float(resid @ resid) / ss_tot if ss_tot > 0 else math.nan
        r2_loo = 1 - float(loo @ loo) / ss_tot if ss_tot > 0 else math.nan
        return cls(z=z, r2=r2, r2_loo=r2_loo, n=len(alpha))

    def predict(self, u: np.ndarray, acc_max: float = 0.99) -> float:
        return float(np.clip(np.asarray(u) @ self.z, 0.0, acc_max))


# ---------------------------------------------------------------------------- Eq. 1 / Eq. 3 / Thm 2

def expected_throughput(alpha: float, c: float, gamma: int | None = None, gamma_min: int = 1, gamma_max: int = 8,
                        verify_cost: Callable[[int], float] = lambda g: 1.0) -> tuple[float, int]:
    """Expected tokens per target-step time with a draft of cost ratio c: Eq. 1 with a_q = c and
    b_p(γ) = ``verify_cost(γ)`` (1 = one target step, Leviathan et al.'s assumption; pass the
    measured relative cost of a (γ+1)-token verification where it grows with γ).

    ``gamma=None``: at the γ maximising Eq. 1 (what adaptive γ aims at; §5 "we estimate d = E(γ)
    by finding the numerical integer solution in objective 1"); else at that fixed γ.
    Equal to Eq. 3, R = L / (b_p n + a L/ρ), with n = L / E[tokens per round], ρ = E[tokens]/d
    (:func:`throughput_eq3`). Returns (throughput, γ).
    """
    g = est.best_gamma(alpha, c, verify_cost, gamma_min, gamma_max) if gamma is None else int(gamma)
    return est.objective(alpha, g, c, verify_cost), g


def throughput_eq3(L: float, alpha: float, c: float, gamma: int, verify_cost: float = 1.0) -> float:
    """Eq. 3 (Theorem 1) for a fixed window d = γ: R = L / (b_p n + a L / ρ), b = 1, a = c."""
    tokens = est.expected_tokens(alpha, gamma)
    n = L / tokens
    rho = tokens / gamma  # §5: ρ = (1 − α^{γ+1}) / ((1 − α) d)
    return L / (verify_cost * n + c * L / rho)


def larger_draft_wins(small: tuple[float, float], large: tuple[float, float], L: float = 128, gamma: int | None = None,
                      gamma_min: int = 1, gamma_max: int = 8,
                      verify_cost: Callable[[int], float] = lambda g: 1.0) -> bool:
    """Theorem 2, exactly: with (α, c) of a smaller and a larger draft, the larger one is faster iff
    Δn > L Δ(c/ρ) + (verification-cost terms), i.e. iff its Eq. 3 time n b_p + c L/ρ is smaller.

    (Eq. 7 as printed, Δn > (Δc/Δρ) L, is not this condition: see :func:`theorem2_as_printed`.)
    """
    def time(alpha, c):  # n b_p + a L/ρ with L/ρ = n d: the drafts of n rounds of depth d
        _, g = expected_throughput(alpha, c, gamma, gamma_min, gamma_max, verify_cost)
        n = L / est.expected_tokens(alpha, g)
        return n * verify_cost(g) + c * n * g
    return time(*large) < time(*small)


def theorem2_as_printed(small: tuple[float, float], large: tuple[float, float], gamma: int, L: float = 128) -> bool:
    """Eq. 7 verbatim at a fixed γ: Δn > (Δc / Δρ) L (kept to show where it departs from Eq. 3)."""
    (a_s, c_s), (a_l, c_l) = small, large
    t_s, t_l = est.expected_tokens(a_s, gamma), est.expected_tokens(a_l, gamma)
    dn = L / t_s - L / t_l
    drho = t_l / gamma - t_s / gamma
    return drho > 0 and dn > (c_l - c_s) / drho * L


def alpha_from_record(accepted_tokens: int, rejected_rounds: int) -> float:
    """Realised α of one generation: Eq. 2 uncapped over all its rounds (NaN if it drafted nothing)."""
    total = accepted_tokens + rejected_rounds
    return accepted_tokens / total if total else math.nan


# ---------------------------------------------------------------------------- the selector

@dataclass
class Choice:
    draft: str
    predicted_alpha: dict[str, float]
    throughput: dict[str, float]
    gamma: dict[str, int]


class DraftSelector:
    """Online draft selection (§5 "Algorithm").

    While fitting (fewer than ``n_fit`` observations for some draft) every draft is run on each
    prompt (:meth:`drafts_to_run`; the first draft's output is the one served) and
    :meth:`observe` collects (u, realised α) per draft; at ``n_fit`` each draft's Eq. 8 model is
    fitted once. Afterwards :meth:`choose` returns the draft with the highest expected
    throughput at its predicted α and measured cost ratio ``costs[name]`` (= c).
    """

    def __init__(self, costs: dict[str, float], n_fit: int = N_FIT, gamma: int | None = None, gamma_min: int = 1,
                 gamma_max: int = 8, verify_cost: Callable[[int], float] = lambda g: 1.0, acc_max: float = 0.99):
        if not costs:
            raise ConfigError("draft selection needs at least one draft with a cost ratio c")
        for name, c in costs.items():
            if not (isinstance(c, (int, float)) and 0 < c and math.isfinite(c)):
                raise ConfigError(f"cost ratio c of draft '{name}' = {c!r} out of range; valid: a finite number > 0")
        if not isinstance(n_fit, int) or n_fit < 2:
            raise ConfigError(f"n_fit = {n_fit!r} out of range; valid: an integer >= 2 (prompts per draft)")
        if gamma is not None and not (isinstance(gamma, int) and gamma >= 1):
            raise ConfigError(f"gamma = {gamma!r} out of range; valid: null (adaptive) or an integer >= 1")
        self.costs, self.n_fit, self.gamma = dict(costs), n_fit, gamma
        self.gamma_min, self.gamma_max, self.verify_cost, self.acc_max = gamma_min, gamma_max, verify_cost, acc_max
        self.samples: dict[str, list[tuple[np.ndarray, float]]] = {k: [] for k in costs}
        self.models: dict[str, AlphaModel] = {}

    @property
    def fitting(self) -> bool:
        return len(self.models) < len(self.costs)

    def drafts_to_run(self, u: np.ndarray | None = None) -> list[str]:
        if self.fitting:
            return list(self.costs)
        if u is None:
            raise ValueError("a fitted selector chooses by the prompt's features: drafts_to_run(u)")
        return [self.choose(u).draft]

    def observe(self, draft: str, u: np.ndarray, alpha: float) -> None:
        if draft not in self.costs:
            raise ConfigError(f"unknown draft '{draft}'; valid: {', '.join(self.costs)}")
        if draft in self.models or not math.isfinite(alpha):
            return
        self.samples[draft].append((np.asarray(u, dtype=float), float(alpha)))
        if len(self.samples[draft]) >= self.n_fit:
            us = np.stack([s[0] for s in self.samples[draft]])
            self.models[draft] = AlphaModel.fit(us, np.array([s[1] for s in self.samples[draft]]))

    def r2(self) -> dict[str, tuple[float, float]]:
        """(in-sample R², leave-one-out R²) per fitted draft."""
        return {k: (m.r2, m.r2_loo) for k, m in self.models.items()}

    def choose(self, u: np.ndarray) -> Choice:
        if self.fitting:
            raise RuntimeError(f"draft selection is still fitting (needs {self.n_fit} prompts per draft)")
        alpha = {k: m.predict(u, self.acc_max) for k, m in self.models.items()}
        thr, gam = {}, {}
        for k, a in alpha.items():
            thr[k], gam[k] = expected_throughput(a, self.costs[k], self.gamma, self.gamma_min, self.gamma_max,
                                                 self.verify_cost)
        best = max(thr, key=lambda k: (thr[k], -self.costs[k]))
        return Choice(draft=best, predicted_alpha=alpha, throughput=thr, gamma=gam)
