"""Target-initialised multi-candidate speculative decoding (mcsd §3.1, Fig. 1 right, §4.1, Table 1-2).

The k-config's first entry n_t is the number of tokens sampled from the TARGET's distribution to
start the candidate sequences; the draft expands each of them per the rest: the paper's (2, 4, 3, 1,
1) is 2 target tokens, then 4 × 3 × 1 × 1 = 12 sequences of γ = 4 draft tokens under each (40 draft
tokens per root, 24 sequences, 82 tree nodes; a (2 + 80)² mask, §3.1). Each round starts from r, the
target's next-token distribution at the end of the committed sequence: in the first round from a
prefill of the prompt — §3.1's one extra target forward (``target_calls`` = rounds + 1) — and after
that from the correction distribution where the previous round's winning path stopped. n_t distinct
roots are drawn from r without replacement, the draft builds the tree (siblings without replacement,
one draft forward per level), the target scores all of it in ONE forward with the topology-aware
mask sliced from one built for the whole tree (§3.2), every root's subtree is walked with MCSD's rule
(Yang et al. 2024 Alg. 2), and the root with the longest accepted path wins (ties: the first drawn).
The round commits the root and its accepted drafts (``accept_lengths`` = accepted + 1, the root in
the place of the correction token); γ = ``len(k_config) − 1``.

NOT LOSSLESS for n_t ≥ 2 (§3.1): selecting the root by its accepted length makes
P_out(t) = Σ_{S ∋ t} P(roots = S) · P(t's accepted path is the longest of S's | S) — the paper's
P_output(t) = P_target(t) × P_acceptance(t+1, t+2, … | t) — so tokens whose continuations the draft
predicts well are favoured; the seed measures the quality loss growing with n_t (Table 1). n_t = 1
is exact: the root is a draw from r, i.e. MCSD with its correction token drawn one round later
(tested against the enumerated target distribution in ``tests/decoders/test_mcsd_variants.py``, where a slow
test also detects n_t = 2's bias; ``scripts/study_mcsd.py`` measures it as a TV distance). Greedy (temperature 0): r is the target's
argmax (one-hot), which has a single distinct token, so every tree has one root and the output is the
target's greedy output for any n_t (the seed reports no greedy results for n_t = 2, §4.1).

The paper's T 0 rows (Table 4: α 0.76-0.96 under greedy decoding) need several roots: ``greedy_roots:
top_nt`` takes the target's top-n_t tokens (of its raw logits where the previous round stopped) as the
roots under greedy decoding, each walked greedily, the longest accepted path winning. A non-argmax root can
win, so the output is no longer greedy: NOT LOSSLESS (marked † in every table). ``null`` (the default,
``argmax``) keeps the one exact root.

Optional early stop (the paper's framework, §3.2-3.3): ``decision_model``/``decision_threshold`` as in
``mcsd_dynamic``; ``k_config`` (W, 1, …, 1) is the target-initialised fork of App. A.1 / §5. A γ policy
gives each round's maximum depth (the first levels of the k-config). Extras: ``early_stops``,
``decision_checks``, and ``other_root_wins`` — rounds won by a root other than the first drawn, i.e.
where the selection departed from a plain draw from r (always 0 for n_t = 1).
"""
from __future__ import annotations

from dataclasses import dataclass

import torch

from harness.decoders.base import register
from harness.decoders.params.mcsd_target_init import TargetInitParams
from harness.decoders.mcsd_dynamic import EarlyStopExtras, begin_round, stop_rule
from harness.decoders.speculative import SpeculativeDecoder
from harness.primitives.acceptance import multi_step_select_without_replacement
from harness.primitives.drafting import merge_duplicates
from harness.primitives.multi_candidate import BestRootWalk, TargetInit, TreeMasks, target_prefill, target_roots
from harness.primitives.tree_attention import level_order_parents


@dataclass
class TopRootsState(TargetInit):
    """:class:`TargetInit` plus the target's raw logits where the committed sequence ends (``greedy_roots:
    top_nt``: r is one-hot under greedy, the top-n_t roots need the logits)."""

    logits: torch.Tensor | None = None


@dataclass(frozen=True)
class KeepLogits:
    """A :class:`BestRootWalk` that keeps the target's raw logits after the winning path (the next round's roots)."""

    walk: BestRootWalk

    def __call__(self, v, generator):
        path, token = self.walk(v, generator)
        self.walk.state.logits = v.node_logits[path[-1]] if path else v.stem_logits[-1]
        return path, token

    def greedy(self) -> KeepLogits:
        return KeepLogits(self.walk.greedy())


@dataclass
class TargetInitExtras(EarlyStopExtras):
    other_root_wins: int = 0  # rounds won by a root other than the first drawn (the biased selection of §3.1)


@register
class MCSDTargetInit(SpeculativeDecoder[TargetInitParams]):
    method = "mcsd_target_init"
    in_default_sweep = False  # the mcsd paper's variants run in its experiment (mcsd_tables)
    supports_draft_selection = False  # the masks and the decision model belong to one draft
    Extras = TargetInitExtras

    def __init__(self, pair, params=None, **kwargs):
        super().__init__(pair, params, **kwargs)
        self.stop = stop_rule(self.params, pair, self.draft)
        k_config = list(self.params.k_config)
        if self.params.warp.is_greedy and not self.params.top_roots:
            k_config[0] = 1  # one-hot r: one distinct root (module docstring)
        self.masks = TreeMasks.for_parents(level_order_parents(k_config), self.target, self.draft)
        self.verify_mask = self.masks.target

    def is_lossless(self) -> bool:
        return self.params.target_tokens == 1 or (self.params.warp.is_greedy and not self.params.top_roots)

    def max_depth(self) -> int:
        """The masks are built for the k-config's tree: an adaptive policy's γ_max is at most its draft depth."""
        return self.params.gamma

    def begin(self, spec):
        if self.stop is not None:
            self.stop.reset()
        if not self.params.top_roots:
            spec.state = TargetInit()
            target_prefill(self.target, spec.caches, spec.warp, spec.state)
            return
        spec.state = TopRootsState()  # target_prefill, keeping the raw logits
        logits = self.target(spec.caches.target_pending, spec.caches.target_cache, all_logits=False)[0, -1]
        spec.state.r, spec.state.logits = spec.warp.probs(logits), logits
        spec.caches.target_pending = spec.caches.target_pending[:, :0]

    def acceptance(self, spec):
        walk = BestRootWalk(multi_step_select_without_replacement, spec.state)
        return KeepLogits(walk) if self.params.top_roots else walk

    def propose(self, spec, depth):
        begin_round(self.stop)
        k_config = list(self.params.k_config)[:depth + 1]
        if self.params.top_roots:  # the target's top-n_t tokens, argmax first (other_root_wins: non-argmax wins)
            roots, real = torch.topk(spec.state.logits.float(), k_config[0]).indices, None
        else:
            roots, real = target_roots(spec.state, k_config[0], spec.warp, spec.generator)
        return merge_duplicates(spec.draft_tree(k_config[1:], replacement=False, roots=roots, roots_valid=real,
                                                masks=self.masks.draft, stop=self.stop, read_level=1), distinct=True)

    def extras(self, spec):
        return TargetInitExtras.of(self.stop, other_root_wins=spec.state.other_root_wins)

    def facts(self) -> dict:
        facts = {"target_prefill_calls": 1, "lossless": self.params.target_tokens == 1}
        if self.stop is not None:
            facts.update(decision_model=self.stop.model.info.get("name"), decision_model_kind=self.stop.model.kind)
        return facts
