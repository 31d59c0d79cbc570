"""Lookahead decoding (Fu, Bailis, Stoica & Zhang, ICML 2024, arXiv 2402.02057; ``lookahead``): no draft model —
the target drafts for itself with Jacobi iterations and verifies n-grams it cached, in ONE forward per step.

Each step's forward holds, after the committed tokens not yet cached:

* the **lookahead branch**, a 2D window of N − 1 levels × W columns: level 0 is the oldest Jacobi iterate,
  each later level one iteration newer and one position further (level l, column j sits j + l + 1 positions
  after the last committed token). Token (l, j) sees the committed sequence, level 0's columns ≤ j and its own
  column's levels < l (the paper's mask, Fig. 2(b)): a token tree whose node (0, j) hangs below (0, j − 1) and
  (l, j) below (l − 1, j), so the tree-attention primitives build its mask and positions. The newest level's
  outputs (argmax) are the next level; once N levels exist, every column is an n-gram — its first token
  and the N − 1 after it go to the **n-gram pool**, and the oldest level is dropped. The window starts as W
  tokens drawn from the prompt (a fixed seed) and fills one level per step (the authors' warm-up);
* the **verification branch**: up to G cached n-grams that start with the last committed token (their
  N − 1 continuations, most recent kept, a prefix trie), accepted as deterministic candidates by the
  point-mass rule down the trie (:func:`~harness.primitives.acceptance.point_mass_select`: x accepted with
  probability p̃(x), else p̃ without x, next candidate — the paper's sampling verification, Alg. 4), so the
  output is exactly AR sampling's; greedy: the target's argmax, AR's tokens. The two branches never see
  each other (both hang off the committed sequence).

The pool keeps at most G n-grams per first token (an n-gram seen again becomes the most recent). Defaults:
W = 15, N = 5, G = 15 — the authors' setting for 7B models on an A100 (blog Table 1; their MT-Bench script;
G = W as the paper advises). On a CPU, where a forward's cost grows with its tokens, smaller windows pay off.
Our window has W columns on every level (the authors' code gives levels ≥ 1 one more column at the front).
"""
from __future__ import annotations

import random
from dataclasses import dataclass

import torch

from harness.decoders.base import register
from harness.decoders.params.lookahead import LookaheadParams
from harness.decoders.speculative import DraftFreeDecoder
from harness.primitives.acceptance import SelectionRule, greedy_select, point_mass_select
from harness.primitives.device import upload
from harness.primitives.drafting import Proposal
from harness.primitives.spec_loop import TreeWalk
from harness.primitives.tree_walk import Verified
from harness.primitives.spec_state import DraftTree
from harness.primitives.tree import TokenTree, children_lists

WINDOW_SEED = 0  # the initial window's draw from the prompt (deterministic: greedy runs repeat exactly)


class Window:
    """One generation's lookahead window (levels of W tokens, oldest first) and n-gram pool, and where the
    current step's newest level sits in the verified tree."""

    def __init__(self, params: LookaheadParams, prompt: list[int]):
        self.w, self.n, self.g = params.window, params.ngram, params.guess
        self.levels = [random.Random(WINDOW_SEED).choices(prompt, k=self.w)]
        self.pool: dict[int, list[tuple[int, ...]]] = {}
        self.newest: list[int] = []  # tree nodes of the newest level in this step's tree

    def guesses(self, last: int, depth: int) -> list[tuple[int, ...]]:
        """The cached n-grams after ``last`` (most recent first), cut to ``depth`` tokens."""
        return [gram[:depth] for gram in reversed(self.pool.get(last, []))][:self.g]

    def propose(self, last: int, depth: int, device) -> Proposal:
        """The step's tree: the guesses' trie (the verified candidates), then the window's levels."""
        tokens: list[int] = []
        parents: list[int] = []
        child: dict[tuple[int, int], int] = {}
        grams = self.guesses(last, depth)
        for gram in grams:
            node = -1
            for tok in gram:
                if (node, tok) not in child:
                    child[(node, tok)] = len(tokens)
                    tokens.append(tok)
                    parents.append(node)
                node = child[(node, tok)]
        n_verify = len(tokens)
        prev: list[int] = []
        for level, row in enumerate(self.levels):
            first = len(tokens)
            tokens += row
            parents += ([-1] + list(range(first, first + self.w - 1))) if level == 0 else prev
            prev = list(range(first, first + self.w))
        self.newest = prev
        ids = upload(tokens, device)  # the host-built trie and window: copied without waiting
        dtree = DraftTree(ids[:n_verify], parents[:n_verify], None, None, 0, depth=max(map(len, grams), default=0))
        return Proposal(dtree, TokenTree(ids, parents), children_lists(parents[:n_verify]))

    def outputs(self, node_logits: torch.Tensor) -> torch.Tensor:
        """The newest level's outputs (the target's argmax after each of its nodes), on the device."""
        return node_logits[self.newest[0]:self.newest[-1] + 1].argmax(-1)  # the level's nodes are consecutive

    def advance(self, outputs: list[int]) -> None:
        """One Jacobi iteration: the newest level's ``outputs`` become a level; full columns go to the pool."""
        self.levels.append(list(outputs))
        if len(self.levels) == self.n:
            for column in zip(*self.levels):
                grams = self.pool.setdefault(column[0], [])
                if column[1:] in grams:
                    grams.remove(column[1:])
                grams.append(column[1:])
                del grams[:-self.g]
            self.levels.pop(0)


@dataclass(frozen=True)
class LookaheadAcceptance:
    """The verification branch walked with ``select`` (only the guesses' trie is a candidate), after the
    lookahead branch's outputs advanced the window."""

    window: Window
    select: SelectionRule

    def __call__(self, v: Verified, generator) -> tuple[list[int], int]:
        v.extra = self.window.outputs(v.node_logits)  # read with the walk's outcome
        out = TreeWalk(self.select)(v, generator)
        assert v.extra_host is not None  # the walk read the outputs with its outcome
        self.window.advance(v.extra_host)
        return out

    def greedy(self) -> LookaheadAcceptance:
        return LookaheadAcceptance(self.window, greedy_select)


@register
class LookaheadDecoding(DraftFreeDecoder[LookaheadParams]):
    method = "lookahead"
    lossless = True
    in_default_sweep = False  # W·(N−1) + G·(N−1) tokens per forward: slow on the 2-CPU default sweep

    def begin(self, spec) -> None:
        spec.state = Window(self.params, spec.tokens)

    def acceptance(self, spec) -> LookaheadAcceptance:
        return LookaheadAcceptance(spec.state, point_mass_select)

    def propose(self, spec, depth: int) -> Proposal:
        return spec.state.propose(spec.tokens[-1], depth, spec.caches.target_pending.device)
