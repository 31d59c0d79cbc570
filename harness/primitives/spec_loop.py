"""The speculative round and the loop around it, written once for SD, SpecInfer, Spectr, MCSD, MTAD, BiLD, typical.

* :func:`chain_step` — one vanilla round: γ draft forwards, ONE target forward, speculative sampling;
* :func:`tree_step` — one token-tree round: draft the tree, merge duplicates, ONE target forward
  with tree attention, walk down with a :data:`~harness.primitives.acceptance.SelectionRule`;
* :func:`accept_walk` — the walk down a verified tree with a selection rule (shared by every tree round);
* :func:`verify_chain` — ONE target forward over a drafted chain, a pluggable
  :data:`~harness.primitives.acceptance.ChainRule`, and the rollback of both caches (for chain
  methods that draft their own way: MTAD's beams, BiLD's fallback);
* :func:`speculative_loop` — rounds until ``max_new_tokens`` or EOS, γ from a
  :class:`~harness.primitives.gamma_policy.GammaPolicy`; the only place rounds are recorded.

Each round's drafting and verification are timed by the caches' :class:`~harness.primitives.spec_state.StepClock`.
``temperature == 0`` is greedy: drafts are the draft's argmax (top-k for several children), a draft
token is accepted iff it is the target's argmax, so the output is the target's greedy output.
"""
from __future__ import annotations

from typing import Callable, Mapping

import torch

from harness.primitives.acceptance import (ChainRule, SelectionRule, accept_chain, accept_chain_greedy,
                                           greedy_select)
from harness.primitives.drafting import draft_tree, merge_duplicates
from harness.primitives.gamma_policy import GammaPolicy, RoundObservation
from harness.primitives.sampling import sample
from harness.primitives.spec_state import DraftTree, SpeculativeCaches, StepResult, commit_draft, commit_target
from harness.primitives.stopping import StopCondition
from harness.primitives.tree import TokenTree, tree_forward
from harness.primitives.warping import Warp


def draw(dist: torch.Tensor, warp: Warp, generator) -> int:
    """The next token from a (warped, or correction) distribution: its argmax when greedy."""
    return int(dist.argmax()) if warp.is_greedy else int(sample(dist, generator)[0])


def accept_walk(start: int, candidates: Mapping[int, list[int]], tokens: torch.Tensor,
                p_at: Callable[[int], torch.Tensor], q_at: Callable[[int], torch.Tensor | None], select: SelectionRule,
                generator) -> tuple[list[int], torch.Tensor]:
    """Walk down a verified token tree from ``start`` (−1: the committed sequence), accepting with ``select``.

    At node u the candidates ``candidates[u]`` (children in draw order) go through
    ``select(p_at(u), q_at(u), their tokens, generator)``; the walk moves to the accepted child, or stops
    where none is accepted (the rule's correction distribution) or at a leaf (``p_at(leaf)``, the bonus
    distribution). Returns (accepted nodes below ``start``, distribution of the next token).
    """
    path: list[int] = []
    node = start
    while True:
        p = p_at(node)
        cands = candidates.get(node)
        if not cands:
            return path, p
        idx, dist = select(p, q_at(node), tokens[cands], generator)
        if idx is None:
            return path, dist
        node = cands[idx]
        path.append(node)


def verify_chain(target, caches: SpeculativeCaches, dtree: DraftTree, draft_prefix: int, rule: ChainRule) -> StepResult:
    """Score the chain in ONE target call, apply ``rule(logits (n+1, V), tokens (n,)) -> (kept, next)``,
    keep the accepted path in both caches and make ``next`` pending for both models.

    ``draft_prefix`` is the draft cache length once its pending tokens were fed (before the chain).
    The verification (target call, rule, rollback) is timed; drafting was timed by the caller.
    """
    with caches.clock.verifying():
        target_prefix = caches.target_prefix()
        stem_logits, node_logits = tree_forward(target, caches.target_cache, caches.target_pending,
                                                TokenTree.chain(dtree.tokens), all_stem=False)
        logits = torch.cat([stem_logits[-1:], node_logits])
        kept, new_token = rule(logits, dtree.tokens)
        path = list(range(kept))
        commit_target(caches, target_prefix, path, new_token)
        commit_draft(caches, draft_prefix, dtree, path, new_token)
    draft_s, verify_s = caches.clock.take()
    n = dtree.tokens.numel()
    return StepResult(dtree.tokens[:kept].tolist() + [new_token], gamma=n, draft_nodes=n, accepted=kept,
                      draft_time_s=draft_s, verify_time_s=verify_s)


def chain_step(target, draft, caches: SpeculativeCaches, gamma: int, warp: Warp, generator) -> StepResult:
    """One vanilla speculative-decoding round: γ draft forwards, ONE target forward (γ = 0: a target step)."""
    with caches.clock.drafting():
        draft_prefix = caches.draft_prefix()
        dtree = draft_tree(draft, caches, [1] * gamma, warp, generator)
        if warp.is_greedy:
            rule = accept_chain_greedy
        else:
            q = (torch.cat([dtree.root_q[None], dtree.node_q]) if dtree.node_q is not None
                 else dtree.root_q[None] if dtree.root_q is not None else None)

            def rule(logits, tokens):
                if q is None:  # γ = 0: the target's own token
                    return 0, draw(warp.probs(logits[0]), warp, generator)
                return accept_chain(warp.probs(logits), q, tokens, generator)

    return verify_chain(target, caches, dtree, draft_prefix, rule)


def tree_step(target, draft, caches: SpeculativeCaches, widths: list[int], warp: Warp, generator,
              select: SelectionRule, replacement: bool = True) -> StepResult:
    """One token-tree round: draft the tree, ONE target forward, walk down accepting, roll back.

    At each node the candidates (its children, in draw order) go through ``select``; the walk
    moves to the accepted child, or stops with a token drawn from the rule's correction
    distribution; at a leaf the bonus token is drawn from the target's distribution there.
    Greedy: :func:`~harness.primitives.acceptance.greedy_select` (the child equal to the
    target's argmax). ``replacement`` is how the draft draws siblings (it must match ``select``).
    """
    with caches.clock.drafting():
        draft_prefix = caches.draft_prefix()
        dtree = draft_tree(draft, caches, widths, warp, generator, replacement)
        merged = merge_duplicates(dtree)
    if warp.is_greedy:
        select = greedy_select
    with caches.clock.verifying():
        tree = merged.tree
        target_prefix = caches.target_prefix()
        stem_logits, node_logits = tree_forward(target, caches.target_cache, caches.target_pending, tree,
                                                all_stem=False)
        path, dist = accept_walk(
            -1, merged.candidates, tree.tokens, lambda n: warp.probs(stem_logits[-1] if n < 0 else node_logits[n]),
            lambda n: None if warp.is_greedy else dtree.q_after(merged.draft_node[n] if n >= 0 else -1),
            select, generator)
        new_token = draw(dist, warp, generator)
        commit_target(caches, target_prefix, path, new_token)
        commit_draft(caches, draft_prefix, dtree, [merged.draft_node[n] for n in path], new_token)
    draft_s, verify_s = caches.clock.take()
    return StepResult(tree.tokens[path].tolist() + [new_token], gamma=len(widths), draft_nodes=len(dtree.parents),
                      accepted=len(path), draft_time_s=draft_s, verify_time_s=verify_s)


def speculative_loop(step, policy: GammaPolicy, prompt_ids: list[int], max_new_tokens: int,
                     stop: StopCondition | int | None, stats) -> list[int]:
    """Run ``step(depth) -> StepResult`` until ``max_new_tokens``, EOS or a stop string; record every round.

    The depth of a round is the policy's γ, clipped to the tokens still needed − 1 but at least 1
    (a shorter draft is as exact as a full one and saves work at the end); a policy's γ = 0 is one
    plain target step. ``stop`` is a :class:`~harness.primitives.stopping.StopCondition` (or just the
    EOS id): after each round it may cut the round's tokens, and the round is then recorded as cut
    (committed = the tokens kept, counted as accepted drafts + one as every round is), so the statistics describe the
    output. Each round is reported once, as a :class:`~harness.primitives.gamma_policy.RoundObservation`,
    to ``stats.observe_round`` and to the policy.
    """
    stop = StopCondition.of(stop)
    policy.reset(prompt_ids)
    out: list[int] = []
    while len(out) < max_new_tokens:
        depth = max(0, min(policy.next_gamma(), max(1, max_new_tokens - len(out) - 1)))
        res = step(depth)
        tokens, accepted = res.tokens, res.accepted
        end = stop.cut(out, tokens)
        if end is not None:  # the round is recorded as cut: the kept tokens are its accepted drafts + one
            tokens, accepted = tokens[:end], min(accepted, end - 1)
        obs = RoundObservation(gamma=res.gamma, accepted=accepted, draft_nodes=res.draft_nodes,
                               committed=tuple(tokens), draft_time_s=res.draft_time_s,
                               verify_time_s=res.verify_time_s)
        stats.observe_round(obs)
        policy.observe(obs)
        out.extend(tokens)
        if end is not None:
            break
    return out[:max_new_tokens]
