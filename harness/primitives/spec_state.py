"""State of one speculative generation, written once for every draft-then-verify decoder.

* :class:`SpeculativeCaches` — both models' KV caches plus the committed tokens each has not seen
  yet, so that no prefix is ever recomputed, and the :class:`StepClock` of the round;
* :class:`DraftTree` — draft tokens with their parents and the draft distributions they came from
  (a chain is a tree whose nodes each have one child);
* :func:`commit_target` / :func:`commit_draft` — roll both caches back to the accepted path.

Imports run one way: ``spec_state`` ← ``drafting`` ← ``spec_loop``; ``acceptance`` is pure.
"""
from __future__ import annotations

import math
import time
from contextlib import contextmanager
from dataclasses import dataclass

import torch

from harness.primitives.forward import synchronize
from harness.primitives.kv_cache import cache_length, new_cache
from harness.primitives.tree import commit_path

NAN = float("nan")


class StepClock:
    """Host-side time of the current round's drafting and verification (``time.perf_counter``).

    With ``sync`` the device is synchronised at every boundary, so that queued GPU work is
    attributed to the phase that queued it (a no-op on CPU); without it the times are host time only.
    :meth:`take` hands the round's two times over and resets them to NaN (not measured).
    """

    def __init__(self, device: torch.device | str, sync: bool = False):
        self.device = torch.device(device)
        self.sync = sync
        self.draft_s = NAN
        self.verify_s = NAN

    def now(self) -> float:
        if self.sync:
            synchronize(self.device)
        return time.perf_counter()

    @contextmanager
    def _span(self, attr: str):
        start = self.now()
        try:
            yield
        finally:
            setattr(self, attr, _plus(getattr(self, attr), self.now() - start))

    def drafting(self):
        """Context: time spent drafting (added to the round's draft seconds)."""
        return self._span("draft_s")

    def verifying(self):
        """Context: time spent on the target's verification, acceptance and rollback."""
        return self._span("verify_s")

    def take(self) -> tuple[float, float]:
        """(draft seconds, verify seconds) of the round so far; both reset to NaN."""
        out = (self.draft_s, self.verify_s)
        self.draft_s = self.verify_s = NAN
        return out


def _plus(total: float, dt: float) -> float:
    return dt if math.isnan(total) else total + dt


class SpeculativeCaches:
    """KV caches of target and draft, and the committed tokens each cache still lacks (``*_pending``).

    Invariant: cache + pending = the committed sequence. The caches start empty with the
    whole prompt pending, so the prompt is prefilled inside the first round's draft and
    target forwards (as HF assisted generation does): one target call per round, none extra.
    """

    def __init__(self, target, draft, prompt_ids: torch.Tensor, sync_timing: bool = False):
        if prompt_ids.numel() == 0:
            raise ValueError("speculative decoding needs a prompt of at least one token")
        self.target_cache = new_cache(target.model)
        self.draft_cache = new_cache(draft.model) if draft is not None else None  # None: a draft-free method
        self.target_pending = prompt_ids
        self.draft_pending = prompt_ids
        self.clock = StepClock(prompt_ids.device, sync_timing)

    def draft_prefix(self) -> int:
        """Length of the committed sequence as the draft cache will hold it once its pending tokens are fed."""
        return cache_length(self.draft_cache) + self.draft_pending.size(1)

    def target_prefix(self) -> int:
        """Length of the committed sequence as the target cache will hold it once its pending tokens are fed."""
        return cache_length(self.target_cache) + self.target_pending.size(1)


@dataclass
class DraftTree:
    """Draft tokens in breadth-first (drafting) order with the distributions they were drawn from.

    ``parents[i]`` indexes an earlier node (−1: child of the committed sequence).
    ``root_q`` (V,) is T∘q at the committed sequence; ``node_q[i]`` (V,) is T∘q after node i,
    for the ``num_fed`` nodes the draft model has processed (all but the last level). Both
    are None when greedy (or when the drafting method keeps no distributions). ``depth`` is the
    number of levels; ``n_roots`` counts first-level tokens the target sampled (target-initialised
    trees, mcsd §3.1: not drafts); ``joint_logq`` (n,) the draft's joint log-likelihoods of a chain's
    prefixes, where the drafting computed them (MTAD's beam draft).
    """

    tokens: torch.Tensor
    parents: list[int]
    root_q: torch.Tensor | None
    node_q: torch.Tensor | None
    num_fed: int
    depth: int = 0
    n_roots: int = 0
    joint_logq: torch.Tensor | None = None
    #: (N,) bool on the device: which nodes are real draws, where the drafting kept children a row could not give
    #: (``draft_tree(defer_invalid=True)``); ``n_dead``: how many nodes are dead for it (not drafts; set by the
    #: walk, from its read)
    valid: torch.Tensor | None = None
    n_dead: int = 0

    def q_after(self, node: int) -> torch.Tensor | None:
        """T∘q after ``node`` (−1: the committed sequence); None where the drafts were not drawn from a
        distribution (deterministic candidates: a point mass on each)."""
        return self.root_q if node < 0 or self.node_q is None else self.node_q[node]

    @property
    def gamma(self) -> int:
        """γ_r: the levels the draft proposed (target-sampled roots excluded)."""
        return self.depth - (1 if self.n_roots else 0)

    @property
    def draft_nodes(self) -> int:
        """Tokens the draft proposed (target-sampled roots excluded)."""
        return len(self.parents) - self.n_roots - self.n_dead

    @classmethod
    def chain(cls, tokens: torch.Tensor, num_fed: int, joint_logq: torch.Tensor | None = None) -> DraftTree:
        """A chain of draft tokens of which the draft model has processed the first ``num_fed``."""
        n = tokens.numel()
        return cls(tokens, list(range(-1, n - 1)), None, None, num_fed, depth=n, joint_logq=joint_logq)

    @classmethod
    def empty(cls, device) -> DraftTree:
        """No draft (γ = 0): the round is one plain target step."""
        return cls(torch.empty(0, dtype=torch.long, device=device), [], None, None, 0)


def commit_target(caches: SpeculativeCaches, target_prefix: int, path: list[int], new_token: int | None,
                  next_ids: torch.Tensor | None = None, parents: list[int] | None = None) -> None:
    """Keep the target cache's prefix plus the accepted tree nodes ``path``; ``new_token`` becomes pending
    (None: nothing is pending — a target-initialised round's path ends the committed sequence, mcsd §3.1).
    ``next_ids``: the same token still on the device, (1, 1), used as is (no host-to-device copy); ``parents``: the
    tree's, the path being a root chain of it (its rollback index then needs no copy, :func:`commit_path`)."""
    commit_path(caches.target_cache, target_prefix, [target_prefix + n for n in path], parents)
    if next_ids is not None and new_token is not None:
        caches.target_pending = next_ids.reshape(1, 1)
        return
    caches.target_pending = torch.tensor([[] if new_token is None else [new_token]], dtype=torch.long,
                                         device=caches.target_pending.device)


def commit_draft(caches: SpeculativeCaches, draft_prefix: int, dtree: DraftTree, draft_path: list[int],
                 new_token: int | None, path_tokens: list[int] | None = None,
                 next_ids: torch.Tensor | None = None) -> None:
    """Roll the draft cache back to the accepted path; unprocessed path tokens become pending.

    If the draft did not run this round (γ = 0: its cache is still short of ``draft_prefix``),
    its pending tokens stay pending, followed by the path's tokens and the new token.
    ``new_token`` None: the round commits the path only (mcsd §3.1). ``path_tokens``: the path's tokens
    already on the host (else read from ``dtree``); ``next_ids``: the new token still on the device, (1, 1).
    """
    if caches.draft_cache is None:  # a draft-free method: no draft cache to keep
        return
    if path_tokens is None:
        path_tokens = dtree.tokens[draft_path].tolist()
    tail = [] if new_token is None else [new_token]
    if cache_length(caches.draft_cache) < draft_prefix:
        new = _pending(dtree, draft_path, path_tokens, tail, next_ids, caches.draft_pending.device)
        caches.draft_pending = torch.cat([caches.draft_pending, new], dim=1)
        return
    in_cache = [n for n in draft_path if n < dtree.num_fed]
    commit_path(caches.draft_cache, draft_prefix, [draft_prefix + n for n in in_cache], dtree.parents)
    k = len(in_cache)
    caches.draft_pending = _pending(dtree, draft_path[k:], path_tokens[k:], tail, next_ids,
                                    caches.draft_pending.device)


def _pending(dtree: DraftTree, nodes: list[int], tokens: list[int], tail: list[int], next_ids, device) -> torch.Tensor:
    """(1, n) ids: the draft ``nodes`` (their ``tokens``) and then ``tail``. Without a host-to-device copy when the
    nodes are consecutive and the tail's token is on the device (``next_ids``) or there is none: a chain's usual
    round, a target-initialised round's path."""
    consecutive = nodes == list(range(nodes[0], nodes[0] + len(nodes))) if nodes else True
    if consecutive and (not tail or (next_ids is not None and len(tail) == 1)):
        start = nodes[0] if nodes else 0
        drafts = dtree.tokens[start:start + len(nodes)].reshape(1, -1).to(device)
        return drafts if not tail else torch.cat([drafts, next_ids.reshape(1, 1)], dim=1)
    return torch.tensor([tokens + tail], dtype=torch.long, device=device)
