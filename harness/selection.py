"""Draft-model selection (adaptive §5): ``draft_selection=ols`` with a pair of several drafts wraps a decoder.

:class:`DraftSelection` holds one decoder per draft of the pair (each with its own γ policy: a policy's
history — online's a_q, b_p(γ), q-learning's table — belongs to the draft it measured) and, per prompt,
generates with the chosen draft's. Design ("ols", the paper's algorithm, run online inside one cell):

1. :meth:`DraftSelection.prepare` (the runner's ``Decoder.prepare(prompts)`` hook, before any
   generation) fits the prompt features of :class:`~harness.adaptive.draft_selection.PromptFeaturizer`
   on the cell's prompts: length, perplexity (Eq. 9) and TF-IDF (LSA components). No α is needed.
   **Perplexity under the cheapest draft** (fewest parameters): the feature must be paid for every
   prompt before decoding starts; under the cheapest draft it costs c ≈ 0.25 of a target prefill on the
   tiny pair, under the target a whole extra prefill, and the draft's perplexity is what tracks how
   predictable the prompt's continuation is *for a draft* (§5: "the language model is more confident").
2. Fitting phase: for the first ``fit_prompts`` prompts (r = 25, §6.1) every draft runs on
   the prompt; each run's realised α (Eq. 2 uncapped over its rounds: accepted ÷ (accepted + rejected
   rounds)) and its measured cost ratio c = (draft time per draft call) ÷ (verification time per
   target call) are collected. The pair's default (first) draft's generation is the one returned;
   the others' wall time is ``selection.fit_extra_time_s``. A prompt seen again (the runner's warm-up
   generation uses prompt 0) replaces its earlier observation.
3. Once every draft has r prompts, Eq. 8's OLS Ẑ_c is fitted per draft and, for each new prompt,
   the predicted α̂ per draft gives the expected throughput of Eq. 1 (γ at its optimum, the draft's
   measured c, b_p = one verification); the highest wins — Theorem 2's pairwise condition, written
   exactly (:func:`~harness.adaptive.draft_selection.larger_draft_wins`).

Each generation's ``selection`` dict (records: ``selection.*``): ``phase`` (fit | select), ``draft``
(the chosen draft id), ``alpha_predicted`` (NaN while fitting), ``alpha_realised``, ``fit_r2``,
``fit_r2_loo`` (of the chosen draft's Eq. 8 model; NaN while fitting), ``c`` (its cost ratio),
``fit_extra_time_s`` (the other drafts' runs while fitting), ``feature_time_s`` (the perplexity forward:
not in ``wall_time_s``, which times the generation only).
"""
from __future__ import annotations

import math
import time
from typing import Any, Callable

import numpy as np
import torch

from harness.adaptive.columns import selection_columns
from harness.adaptive.selection_params import SELECTIONS, NoSelection, SelectionParams  # noqa: F401 (their home)
from harness.adaptive.draft_selection import DraftSelector, PromptFeaturizer, alpha_from_record
from harness.decoders.base import Decoder, Generation
from harness.errors import ConfigError
from harness.metrics.perplexity import output_perplexity
from harness.models import ModelPair


def _params(model) -> int:
    return sum(p.numel() for p in model.parameters())


class DraftSelection:
    """A decoder per draft of the pair, one chosen per prompt (module docstring). It answers as a decoder
    does (``generate``, ``prepare``, ``params_dict``, ...); other attributes are the default draft's decoder's."""

    def __init__(self, pair: ModelPair, make: Callable[[ModelPair], Decoder], params: SelectionParams):
        if len(pair.drafts) < 2:
            raise ConfigError("draft_selection=ols needs a pair with several drafts (pair.drafts, e.g. "
                              f"pair=tiny_multi); pair '{pair.name}' has {len(pair.drafts)}")
        self.pair, self.params_selection = pair, params
        self.drafts = list(pair.drafts)
        self.default: str = pair.draft_id if pair.draft_id is not None and pair.draft_id in pair.drafts \
            else self.drafts[0]
        self.decoders = {d: make(pair.with_draft(d)) for d in self.drafts}
        self.decoder = self.decoders[self.default]
        self.cheapest = min(self.drafts, key=lambda d: _params(pair.drafts[d]))
        self.n_fit = params.fit_prompts
        self.featurizer = PromptFeaturizer(dim=params.features)
        self.features: dict[tuple, np.ndarray] = {}
        self.samples: dict[str, dict[tuple, tuple[np.ndarray, float]]] = {d: {} for d in self.drafts}
        # per draft: Σ draft s, calls, Σ verify s, calls
        self.times: dict[str, list[float]] = {d: [0.0, 0, 0.0, 0] for d in self.drafts}
        self.selector: DraftSelector | None = None
        self.prepared = False
        self.feature_time_s: dict[tuple, float] = {}

    def __getattr__(self, name: str) -> Any:  # the wrapped decoder's attributes (method, params, lossless, ...)
        if name == "decoder":
            raise AttributeError(name)
        return getattr(self.decoder, name)

    def params_dict(self) -> dict[str, Any]:
        """The decoder's parameters with the selection's as the summary's flat columns
        (:func:`harness.adaptive.columns.selection_columns`)."""
        selection = {"name": self.params_selection.name, **self.params_selection.as_dict()}
        return {**self.decoder.params_dict(), **selection_columns(selection)}

    # ------------------------------------------------------------------ features
    def perplexity(self, ids: list[int]) -> float:
        """Eq. 9 under the cheapest draft: exp of the mean NLL of tokens 2..N given their prefix."""
        if len(ids) < 2:
            return 1.0
        with torch.inference_mode():
            return output_perplexity(self.pair.drafts[self.cheapest], ids[:1], ids[1:])

    def prepare(self, prompts: list[list[int]]) -> None:
        prompts = [list(map(int, p)) for p in prompts]
        if len(prompts) < 2:
            raise ConfigError("draft_selection=ols fits its features on the cell's prompts: "
                              f"needs >= 2, got {len(prompts)}")
        ppls = []
        for p in prompts:
            t0 = time.perf_counter()
            ppls.append(self.perplexity(p))
            self.feature_time_s[tuple(p)] = time.perf_counter() - t0
        self.featurizer.fit(prompts, ppls)
        self.features = {tuple(p): self.featurizer.transform(p, q) for p, q in zip(prompts, ppls)}
        self.prepared = True

    def feature(self, ids: list[int]) -> np.ndarray:
        if not self.prepared:
            raise ConfigError("draft_selection=ols: call Decoder.prepare(prompts) with the dataset's prompts first "
                              "(the runner does)")
        key = tuple(ids)
        if key not in self.features:
            t0 = time.perf_counter()
            ppl = self.perplexity(ids)
            self.feature_time_s[key] = time.perf_counter() - t0
            self.features[key] = self.featurizer.transform(ids, ppl)
        return self.features[key]

    # ------------------------------------------------------------------ costs and fit
    def cost(self, draft: str) -> float:
        """c = draft time per draft call ÷ verification time per target call, measured while fitting (the
        parameter-count ratio until a draft has measured rounds)."""
        ds, dc, vs, vc = self.times[draft]
        if dc and vc and ds > 0 and vs > 0:
            return (ds / dc) / (vs / vc)
        return _params(self.pair.drafts[draft]) / _params(self.pair.target)

    def _observe(self, draft: str, key: tuple, u: np.ndarray, gen: Generation) -> float:
        st = gen.stats
        alpha = alpha_from_record(st.accepted_tokens, st.rejected_rounds)
        if math.isfinite(st.draft_time_s) and math.isfinite(st.verify_time_s) and st.draft_calls and st.target_calls:
            t = self.times[draft]
            t[0] += st.draft_time_s
            t[1] += st.draft_calls
            t[2] += st.verify_time_s
            t[3] += st.target_calls
        if math.isfinite(alpha):
            self.samples[draft][key] = (u, alpha)
        if all(len(s) >= self.n_fit for s in self.samples.values()):
            policy = getattr(self.decoder, "policy_params", None)
            self.selector = DraftSelector({d: self.cost(d) for d in self.drafts}, n_fit=self.n_fit,
                                          gamma_min=max(1, getattr(policy, "gamma_min", 1)),
                                          gamma_max=getattr(policy, "gamma_max", 8))
            for d in self.drafts:
                for uu, a in list(self.samples[d].values())[: self.n_fit]:
                    self.selector.observe(d, uu, a)
        return alpha

    @property
    def fitting(self) -> bool:
        return self.selector is None

    # ------------------------------------------------------------------ generate
    def generate(self, prompt_ids, max_new_tokens: int, seed: int | None = None, stop=None) -> Generation:
        """The chosen draft's generation; while fitting, every draft runs and the default draft's is returned."""
        ids = [int(t) for t in torch.as_tensor(prompt_ids).reshape(-1).tolist()]
        key, u = tuple(ids), self.feature(ids)
        nan = math.nan
        if self.selector is None:  # fitting: the default draft's generation is served, the others' time is extra
            served = self.decoders[self.default].generate(ids, max_new_tokens, seed, stop=stop)
            served_alpha, extra = self._observe(self.default, key, u, served), 0.0
            for d in [d for d in self.drafts if d != self.default]:
                gen = self.decoders[d].generate(ids, max_new_tokens, seed, stop=stop)
                self._observe(d, key, u, gen)
                extra += gen.stats.wall_time_s
            served.selection = {"phase": "fit", "draft": self.default, "alpha_predicted": nan,
                                "alpha_realised": served_alpha, "fit_r2": nan, "fit_r2_loo": nan,
                                "c": self.cost(self.default), "fit_extra_time_s": extra,
                                "feature_time_s": self.feature_time_s.get(key, nan)}
            return served
        choice = self.selector.choose(u)
        gen = self.decoders[choice.draft].generate(ids, max_new_tokens, seed, stop=stop)
        st = gen.stats
        model = self.selector.models[choice.draft]
        gen.selection = {"phase": "select", "draft": choice.draft,
                         "alpha_predicted": choice.predicted_alpha[choice.draft],
                         "alpha_realised": alpha_from_record(st.accepted_tokens, st.rejected_rounds),
                         "fit_r2": model.r2, "fit_r2_loo": model.r2_loo, "c": self.selector.costs[choice.draft],
                         "fit_extra_time_s": 0.0, "feature_time_s": self.feature_time_s.get(key, nan)}
        return gen

    def describe(self) -> dict:
        """For summaries: the drafts, the cheapest (perplexity feature), costs and fits."""
        out = {"drafts": self.drafts, "perplexity_draft": self.cheapest, "fit_prompts": self.n_fit}
        if self.selector is not None:
            out.update(costs=dict(self.selector.costs), r2={d: list(v) for d, v in self.selector.r2().items()})
        return out
