"""DSBD: dynamic-width speculative beam decoding (dsbd §3, Algorithm 1, App. A).

One iteration:

1. Draft forest (§3.1, Fig. 2a): the draft model runs beam sampling (Eq. 1 with q) with width W_S
   for γ steps from the W_L input beams; every input beam roots one tree.
2. ONE target call (§3.3, Fig. 3): each input beam keeps its own KV-cache row; its tree is fed
   in that row with the topology-aware mask, so p is known at every node.
3. Layer-by-layer verification (Algorithm 1 via :func:`~harness.primitives.beam_verify.verify_layer`):
   drafts whose parent was rejected are dropped (line 10); the survivors are i.i.d. from q_beam
   restricted to the accepted parents, which is the q_beam used in the test; p_beam is Eq. 1 with
   the target over the accepted beams of the previous layer. Width W_L^(l) is fixed (``width``) or
   dynamic (Eq. 2-7: threshold t, minimum W_min). The first layer with fewer than W_L^(l) accepted
   drafts is filled up (from p', then p_beam) and ends the iteration; if all γ layers pass, an
   extra layer is sampled from p_beam^(γ+1) (lines 32-34) with the width of the last layer.
4. KV caches are gathered for the output beams only (per-row path rollback). In the
   memory-constrained mode (§3.4) only the output beam with the lowest perplexity continues,
   so a single cache row is ever kept between iterations.

Acceptance test: min(1, p'/q_beam), as the App. A proof requires (Alg. 1 line 16 prints q_beam/p').
Theorem 3.1: with a fixed width, each layer's output beams are i.i.d. T∘p_beam, so the output
follows target beam sampling (``beam_sampling``) exactly.
The returned sequence is the final beam with the lowest perplexity (as ``beam_sampling``).
The dsbd paper's warp (§4.1: top-k 10, top-p 0.8) is ``decoding=sampling_dsbd``.

Choices the paper leaves open: Eq. 5/7 use the number of surviving drafts of the layer as M_S;
the extra layer (no draft, so no Eq. 7) keeps the width of the last verified layer; the draft's
beam scores are its own joint likelihoods q(x_{1:t}) of the whole beams (§3.1's q_beam), tracked
across iterations with the draft KV cache.
"""
from __future__ import annotations

from dataclasses import dataclass

import torch

from harness.decoders.base import Beam, DecodeRequest, Decoded, Decoder, register
from harness.decoders.params.dsbd import DSBDParams
from harness.primitives.beam_verify import acceptance_count_distribution, acceptance_rates, dynamic_width, verify_layer
from harness.primitives.beams import beam_distribution, beam_joint_logprobs, extend, lowest_perplexity
from harness.primitives.kv_cache import cache_bytes, cache_length, gather_positions, new_cache
from harness.primitives.round import Round
from harness.primitives.sampling import sample
from harness.primitives.spec_state import StepClock
from harness.primitives.stopping import StopCondition
from harness.primitives.tree import tree_attention_mask, tree_position_ids, with_stem


@dataclass
class DSBDExtras:
    avg_width: float = float("nan")  # W̄ (App. C): output beams per generated step
    avg_accepted_drafts_per_layer: float = float("nan")  # accepted draft beams per verified layer
    peak_kv_rows: int = 1  # target KV rows kept between rounds
    peak_kv_bytes: int = 0  # target + draft caches right after the forest call
    beta_bar: float = float("nan")  # β̄ (Thm 3.2): mean over verified layers of P(≥ W_min accepted), Eq. 2-5
    beta_layers: int = 0  # the layers β̄ averages (to pool prompts)


@dataclass
class _Layer:
    """One drafted layer: W_S draft beams, each a (parent in the previous layer, token) pair."""

    parent: torch.Tensor  # (W_S,) index into the previous layer (layer 0 = the input beams)
    token: torch.Tensor  # (W_S,)
    tree: torch.Tensor  # (W_S,) input beam (KV-cache row) the beam descends from
    q_flat: torch.Tensor  # (n_prev · V,) T∘q_beam the layer was drawn from
    q_logp: torch.Tensor  # (W_S,) draft joint log-likelihood q(x_{1:t+1})
    finished: torch.Tensor  # (W_S,) the beam has produced EOS
    draft_pos: list[int] | None = None  # node index in its draft-cache row (layers < γ only)
    draft_next_logq: torch.Tensor | None = None  # (W_S, V) log q(· | beam) (layers < γ only)
    target_pos: list[int] | None = None  # node index in its target row's tree
    target_next_logp: torch.Tensor | None = None  # (W_S, V) log p(· | beam)


@dataclass
class _Forest:
    layers: list[_Layer]
    draft_prefix: int = 0  # draft cache length once the input beams are complete in it
    root_logq: torch.Tensor | None = None  # (B, V) log q(· | input beam)
    target_prefix: int = 0  # target cache length once the input beams are complete in it
    root_logp: torch.Tensor | None = None  # (B, V) log p(· | input beam)


@dataclass
class _Frontier:
    """Beams of one forest layer that carry on: the input beams, or a layer's accepted drafts."""

    node: torch.Tensor  # index within its layer
    logp: torch.Tensor  # target joint log-likelihood p(x_{1:t})
    finished: torch.Tensor
    length: torch.Tensor  # tokens up to and including EOS
    next_logp: torch.Tensor  # (n, V) log p(· | beam)


@dataclass
class _Beams:
    """Input beams of an iteration: cache + pending tokens = prompt + beam, for either model. The
    prompt is pending at first, so it is prefilled inside the first draft and forest calls."""

    tokens: torch.Tensor  # (B, t) generated tokens
    target_pending: torch.Tensor  # (B, s) tokens not yet in the target cache (the beam's last one, or the prompt)
    logp: torch.Tensor  # target joint log-likelihood (Eq. 1's beam score)
    q_logp: torch.Tensor  # draft joint log-likelihood; without the last pending token while deferred
    finished: torch.Tensor
    length: torch.Tensor
    pending: torch.Tensor  # (B, k) tokens not yet in the draft cache (k = 2 after a fully accepted forest)
    deferred_finished: torch.Tensor | None = None  # finished flags before the last pending token


def _forest_forward(model, cache, prefix_len: int, row_parents: list[list[int]], ids: torch.Tensor) -> torch.Tensor:
    """ONE forward of ``ids`` (B, n) with one tree per batch row; returns logits (B, n, V).

    ``row_parents[b]`` lists the parents of every node fed after ``prefix_len`` in row b, the last n
    being fed now (the others are cached). Masks and positions come from the tree primitives.
    """
    n = ids.size(1)
    dtype = next(model.model.parameters()).dtype
    dev = ids.device
    mask = torch.cat([tree_attention_mask(p, prefix_len, dtype, dev)[:, :, -n:] for p in row_parents])
    pos = torch.cat([tree_position_ids(p, prefix_len, dev)[:, -n:] for p in row_parents])
    return model(ids, cache, position_ids=pos, attention_mask=mask)


@register
class DSBD(Decoder[DSBDParams]):
    """Rounds: γ_r = draft layers (0 for the last token: one target step), draft_nodes = W_S·γ_r draft
    beams, accepted = layers passed; the committed tokens of a round are the first output beam's."""

    method = "dsbd"
    decodings = ("sampling",)
    Extras = DSBDExtras
    uses_draft = True

    def _decode(self, request: DecodeRequest) -> Decoded:
        beams, extras, rounds = self._run(request.prompt_ids, request.max_new_tokens, request.generator,
                                          request.stop)
        best = lowest_perplexity(beams.logp, beams.length)
        return Decoded(beams.tokens[best, : int(beams.length[best])].tolist(), extras,
                       Beam.by_perplexity(beams.tokens, beams.logp, beams.length), rounds)

    def _run(self, prompt_ids: torch.Tensor, max_new_tokens: int, generator,
             stopping: StopCondition) -> tuple[_Beams, DSBDExtras, list[Round]]:
        """The iterations (module docstring, steps 1-4) until every beam is finished or the budget is spent:
        the final beams, the extras, the rounds."""
        dev = self.device
        clock = StepClock(dev, self.sync_timing)
        tcache, dcache = new_cache(self.target.model), new_cache(self.draft.model)
        zero = torch.zeros(1, device=dev)
        beams = _Beams(tokens=torch.empty((1, 0), dtype=torch.long, device=dev), target_pending=prompt_ids,
                       logp=zero, q_logp=zero, finished=torch.zeros(1, dtype=torch.bool, device=dev),
                       length=torch.zeros(1, dtype=torch.long, device=dev), pending=prompt_ids)
        widths, drafts_accepted, peak_rows, peak_bytes, betas, rounds = [], [], 1, 0, [], []
        while beams.tokens.size(1) < max_new_tokens and not bool(beams.finished.all()):
            gamma = min(self.params.gamma, max_new_tokens - beams.tokens.size(1) - 1)
            with clock.drafting():
                forest = self._draft(dcache, beams, gamma, generator) if gamma else _Forest([])
            with clock.verifying():
                self._target_forward(tcache, beams, forest)
                peak_bytes = max(peak_bytes, cache_bytes(tcache) + cache_bytes(dcache))
                front, joint, outcomes, steps, layer_widths, accepted, layer_betas = self._verify(beams, forest, generator)
                beams = self._advance(tcache, dcache, beams, forest, front, joint, outcomes, steps)
            if stopping.stop_strings:
                self._finish_stopped(beams, stopping)
            draft_s, verify_s = clock.take()
            peak_rows = max(peak_rows, beams.tokens.size(0))
            rounds.append(Round(tuple(beams.tokens[0, -steps:].tolist()), gamma=gamma, accepted=steps - 1,
                                draft_nodes=gamma * self.params.draft_width, draft_time_s=draft_s,
                                verify_time_s=verify_s))
            widths += layer_widths
            drafts_accepted += accepted
            betas += layer_betas
        nan = float("nan")
        extras = DSBDExtras(avg_width=sum(widths) / len(widths) if widths else nan,
                            avg_accepted_drafts_per_layer=(sum(drafts_accepted) / len(drafts_accepted)
                                                           if drafts_accepted else nan),
                            peak_kv_rows=peak_rows, peak_kv_bytes=peak_bytes,
                            beta_bar=sum(betas) / len(betas) if betas else nan, beta_layers=len(betas))
        return beams, extras, rounds

    def _finish_stopped(self, beams: _Beams, stopping: StopCondition) -> None:
        """Stop strings (issue 14.3): a beam whose text completes a stop string is finished, like one at EOS,
        and its length is cut after the completing token (an iteration commits several tokens per beam, so
        the tokens after it in this iteration stay in the tensor past ``length``, as after EOS; its joint
        log-likelihood keeps them, a small bias in the lowest-perplexity choice among stopped beams). The
        loop ends when every beam has finished, so no iteration runs past the stop."""
        rows = [t[:n] for t, n in zip(beams.tokens.tolist(), beams.length.tolist())]
        stopped = stopping.rows_stopped(rows)
        if not any(stopped):
            return
        for b, hit in enumerate(stopped):
            if hit:
                kept, _ = stopping.trim(rows[b])
                beams.length[b] = len(kept)
        beams.finished = beams.finished | torch.tensor(stopped, device=self.device)

    # ---------------------------------------------------------------- 1. draft forest (§3.1, Fig. 2a)
    def _draft(self, dcache, beams: _Beams, gamma: int, generator) -> _Forest:
        """Draft beam sampling (Eq. 1 with q), width W_S, γ steps; layers < γ are fed as per-row trees."""
        W_S, warp, eos = self.params.draft_width, self.params.warp, self.eos_sentinel
        logits = self.draft(beams.pending, dcache)
        if beams.deferred_finished is not None:  # complete q(x_{1:t}) with the last pending token
            joint = beam_joint_logprobs(beams.q_logp, torch.log_softmax(logits[:, -2], -1), beams.deferred_finished,
                                        eos)
            beams.q_logp = joint.gather(1, beams.pending[:, -1:]).squeeze(1)
            beams.deferred_finished = None
        forest = _Forest([], draft_prefix=cache_length(dcache), root_logq=torch.log_softmax(logits[:, -1], -1))
        row_parents: list[list[int]] = [[] for _ in range(beams.tokens.size(0))]
        q_logp, next_logq, finished = beams.q_logp, forest.root_logq, beams.finished
        tree = torch.arange(beams.tokens.size(0), device=self.device)
        prev_pos: list[int] | None = None
        for d in range(gamma):
            joint = beam_joint_logprobs(q_logp, next_logq, finished, eos)
            q_flat = beam_distribution(joint, warp)
            ext = extend(joint, sample(q_flat, generator, W_S), finished, eos)
            layer = _Layer(parent=ext.parent, token=ext.token, tree=tree[ext.parent], q_flat=q_flat, q_logp=ext.logp,
                           finished=ext.finished)
            forest.layers.append(layer)
            if d == gamma - 1:
                break  # the last layer's children are never needed from the draft
            ids, cols, start = self._append_nodes(row_parents, layer, prev_pos)
            logits = _forest_forward(self.draft, dcache, forest.draft_prefix, row_parents, ids)
            layer.draft_pos = [start + c for c in cols]
            layer.draft_next_logq = torch.log_softmax(logits[layer.tree, torch.tensor(cols, device=self.device)], -1)
            q_logp, next_logq, finished, tree, prev_pos = (layer.q_logp, layer.draft_next_logq, layer.finished,
                                                           layer.tree, layer.draft_pos)
        return forest

    def _append_nodes(self, row_parents: list[list[int]], layer: _Layer,
                      parent_pos: list[int] | None) -> tuple[torch.Tensor, list[int], int]:
        """Append a layer's beams to their rows' trees; rows are padded to equal size with inert roots.

        Returns the ids to feed (rows, n), each beam's column in them, and the rows' node count before.
        """
        per_row: list[list[int]] = [[] for _ in row_parents]
        for j, b in enumerate(layer.tree.tolist()):
            per_row[b].append(j)
        n = max(len(r) for r in per_row)
        start = len(row_parents[0])
        ids = torch.full((len(row_parents), n), self._pad, dtype=torch.long, device=self.device)
        cols = [0] * layer.token.numel()
        parents = layer.parent.tolist()
        for b, members in enumerate(per_row):
            for col, j in enumerate(members):
                cols[j] = col
                row_parents[b].append(-1 if parent_pos is None else parent_pos[parents[j]])
                ids[b, col] = layer.token[j]
            row_parents[b].extend([-1] * (n - len(members)))  # padding: attended by no real node
        return ids, cols, start

    # ---------------------------------------------------------------- 2. forest-based parallel decoding (§3.3)
    def _target_forward(self, tcache, beams: _Beams, forest: _Forest) -> None:
        """ONE target call: every input beam's pending token(s) and its whole tree, in that beam's cache row."""
        row_parents: list[list[int]] = [[] for _ in range(beams.tokens.size(0))]
        stem = beams.target_pending.size(1)
        ids = [beams.target_pending]
        prev_pos = None
        for layer in forest.layers:
            layer_ids, cols, start = self._append_nodes(row_parents, layer, prev_pos)
            ids.append(layer_ids)
            prev_pos = layer.target_pos = [start + c for c in cols]
        forest.target_prefix = cache_length(tcache)
        logits = _forest_forward(self.target, tcache, forest.target_prefix,
                                 [with_stem(stem, p) for p in row_parents], torch.cat(ids, dim=1))
        forest.target_prefix += stem  # the input beams are complete in the cache; the trees follow
        logp = torch.log_softmax(logits, -1)
        forest.root_logp = logp[:, stem - 1]
        for layer in forest.layers:
            layer.target_next_logp = logp[layer.tree, torch.tensor(layer.target_pos, device=self.device) + stem]

    # ---------------------------------------------------------------- 3. verification (Algorithm 1)
    def _verify(self, beams: _Beams, forest: _Forest, generator):
        """Verify layer by layer. Returns the kept frontier, the joint log p over frontier × V, the
        output beams as flat outcomes of it, the generated steps, per-step widths, accepted drafts."""
        warp, eos, params = self.params.warp, self.eos_sentinel, self.params
        front = _Frontier(node=torch.arange(beams.tokens.size(0), device=self.device), logp=beams.logp,
                          finished=beams.finished, length=beams.length, next_logp=forest.root_logp)
        widths, accepted, betas = [], [], []
        for step, layer in enumerate(forest.layers, start=1):
            joint = beam_joint_logprobs(front.logp, front.next_logp, front.finished, eos)
            vocab = joint.size(-1)
            p_beam = beam_distribution(joint, warp)  # line 12: p_beam over the accepted beams × V
            q_beam = layer.q_flat.reshape(-1, vocab)[front.node].reshape(-1)
            q_beam = q_beam / q_beam.sum().clamp_min(1e-30)  # the drafts' law given their parent survived
            slot_of = torch.full((layer.q_flat.numel() // vocab,), -1, dtype=torch.long, device=self.device)
            slot_of[front.node] = torch.arange(front.node.numel(), device=self.device)
            survivors = torch.nonzero(slot_of[layer.parent] >= 0).flatten()  # line 10
            candidates = slot_of[layer.parent[survivors]] * vocab + layer.token[survivors]
            rates = acceptance_rates(p_beam, q_beam, candidates.numel())
            width = params.width or dynamic_width(rates, params.threshold, params.min_width)  # line 14, Eq. 2-7
            betas.append(1.0 - sum(acceptance_count_distribution(rates)[: params.min_width]))  # β_{W_min}^(l)
            result = verify_layer(p_beam, q_beam, candidates, width, generator)
            widths.append(width)
            accepted.append(sum(s >= 0 for s in result.draft_slot))
            if not result.passed:
                return front, joint, result.outcomes, step, widths, accepted, betas
            kept = survivors[torch.tensor(result.draft_slot, device=self.device)]
            parent_slot = result.outcomes // vocab
            front = _Frontier(node=kept, logp=joint.reshape(-1)[result.outcomes], finished=layer.finished[kept],
                              length=front.length[parent_slot] + (~front.finished[parent_slot]).long(),
                              next_logp=layer.target_next_logp[kept])
        joint = beam_joint_logprobs(front.logp, front.next_logp, front.finished, eos)  # lines 32-34: extra layer
        width = front.node.numel()
        widths.append(width)
        outcomes = sample(beam_distribution(joint, warp), generator, width)
        return front, joint, outcomes, len(forest.layers) + 1, widths, accepted, betas

    # ---------------------------------------------------------------- 4. keep caches of the output beams
    def _advance(self, tcache, dcache, beams: _Beams, forest: _Forest, front: _Frontier, joint: torch.Tensor,
                 outcomes: torch.Tensor, steps: int) -> _Beams:
        """The output beams become the next input beams: scores, tokens, and both caches gathered per
        output beam (its input beam's row, plus the cached positions of its path through the tree)."""
        vocab, eos, layers = joint.size(-1), self.eos_sentinel, forest.layers
        slot, token = outcomes // vocab, outcomes % vocab
        logp = joint.reshape(-1)[outcomes]
        length = front.length[slot] + (~front.finished[slot]).long()
        if self.params.memory_constrained:  # §3.4: only the lowest-perplexity output beam continues
            best = torch.argmin(-logp / length.clamp_min(1)).reshape(1)
            slot, token, logp, length = slot[best], token[best], logp[best], length[best]
        parent_finished = front.finished[slot]
        parent = front.node[slot]  # index within layer `depth` (0 = the input beams)
        depth = steps - 1
        rows, paths = [], []
        for n in parent.tolist():
            path = []
            for d in range(depth, 0, -1):
                path.append(n)
                n = int(layers[d - 1].parent[n])
            rows.append(n)
            paths.append(path[::-1])  # node per layer 1..depth
        rows_t = torch.tensor(rows, device=self.device)
        path_tokens = torch.tensor([[int(layers[d].token[n]) for d, n in enumerate(p)] for p in paths],
                                   dtype=torch.long, device=self.device).reshape(len(rows), depth)
        t_keep = [list(range(forest.target_prefix)) +
                  [forest.target_prefix + layers[d].target_pos[n] for d, n in enumerate(p)] for p in paths]
        gather_positions(tcache, rows_t, torch.tensor(t_keep, device=self.device))
        new = _Beams(tokens=torch.cat([beams.tokens[rows_t], path_tokens, token[:, None]], dim=1),
                     target_pending=token[:, None], logp=logp, q_logp=torch.full_like(logp, float("nan")),
                     finished=parent_finished | (token == eos), length=length, pending=token[:, None])
        if not layers:
            return new  # γ = 0 only for the final token: the draft is never called again (q_logp untracked)
        d_keep = [list(range(forest.draft_prefix)) + [forest.draft_prefix + layers[d].draft_pos[n]
                                                      for d, n in enumerate(p) if layers[d].draft_pos is not None]
                  for p in paths]
        gather_positions(dcache, rows_t, torch.tensor(d_keep, device=self.device))
        if depth and layers[depth - 1].draft_next_logq is None:  # parents are layer-γ drafts, unseen by the draft
            new.q_logp = layers[depth - 1].q_logp[parent]
            new.pending = torch.stack([layers[depth - 1].token[parent], token], dim=1)
            new.deferred_finished = parent_finished
        else:
            next_logq = layers[depth - 1].draft_next_logq[parent] if depth else forest.root_logq[parent]
            prev_q = layers[depth - 1].q_logp[parent] if depth else beams.q_logp[parent]
            new.q_logp = beam_joint_logprobs(prev_q, next_logq, parent_finished, eos).gather(
                1, token[:, None]).squeeze(1)
        return new

    @property
    def _pad(self) -> int:
        return 0 if self.eos_token_id is None else int(self.eos_token_id)
