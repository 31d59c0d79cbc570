"""DSBD: dynamic-width speculative beam decoding (dsbd §3, Algorithm 1, App. A).

One iteration:

1. Draft forest (§3.1, Fig. 2a): the draft model runs beam sampling (Eq. 1 with q) with width W_S
   for γ steps from the W_L input beams; every input beam roots one tree.
2. ONE target call (§3.3, Fig. 3): each input beam keeps its own KV-cache row; its tree is fed
   in that row with the topology-aware mask, so p is known at every node. The forest is laid out in fixed
   slots (:mod:`harness.primitives.forest`: every row holds every layer's W_S slots), so no layout is read.
3. Layer-by-layer verification (Algorithm 1 via :func:`~harness.primitives.beam_verify.verify_layer`):
   drafts whose parent was rejected are dropped (line 10); the survivors are i.i.d. from q_beam
   restricted to the accepted parents, which is the q_beam used in the test; p_beam is Eq. 1 with
   the target over the accepted beams of the previous layer. Width W_L^(l) is fixed (``width``) or
   dynamic (Eq. 2-7: threshold t, minimum W_min). The first layer with fewer than W_L^(l) accepted
   drafts is filled up (from p', then p_beam) and ends the iteration; if all γ layers pass, an
   extra layer is sampled from p_beam^(γ+1) (lines 32-34) with the width of the last layer.
   The layers are verified on the device in row form (``verify_layer_rows``: the same test, the same law), each
   padded to the widest possible frontier; every layer is computed and the first that fails is kept, so that the
   round's outcome (steps, output beams, widths) is read ONCE (issue 28 item 2).
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
from harness.primitives.beams import beam_distribution, beam_joint_logprobs, extend
from harness.primitives.forest import ancestors, forest_mask, forest_positions, slot_visibility
from harness.primitives.forest_verify import ForestLayer, ForestRule, Frontier, Outcome, verify_forest
from harness.primitives.kv_cache import cache_bytes, cache_length, gather_positions, new_cache
from harness.primitives.round import Round
from harness.primitives.sampling import sample
from harness.primitives.spec_state import StepClock
from harness.primitives.stopping import StopCondition


@dataclass
class DSBDExtras:
    avg_width: float = float("nan")  # W̄ (App. C): output beams per generated step
    avg_accepted_drafts_per_layer: float = float("nan")  # accepted draft beams per verified layer
    peak_kv_rows: int = 1  # target KV rows kept between rounds
    peak_kv_bytes: int = 0  # target + draft caches right after the forest call
    beta_bar: float = float("nan")  # β̄ (Thm 3.2): mean over verified layers of P(≥ W_min accepted), Eq. 2-5
    beta_layers: int = 0  # the layers β̄ averages (to pool prompts)


@dataclass
class _Forest:
    layers: list[ForestLayer]
    draft_prefix: int = 0  # draft cache length once the input beams are complete in it
    root_logq: torch.Tensor | None = None  # (B, V) log q(· | input beam)
    target_prefix: int = 0  # target cache length once the input beams are complete in it
    root_logp: torch.Tensor | None = None  # (B, V) log p(· | input beam)


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
        final = Beam.by_perplexity(beams.tokens, beams.logp, beams.length)  # lowest perplexity first, first on ties
        return Decoded(list(final[0].tokens), extras, final, rounds)

    def _run(self, prompt_ids: torch.Tensor, max_new_tokens: int, generator,
             stopping: StopCondition) -> tuple[_Beams, DSBDExtras, list[Round]]:
        """The iterations (module docstring, steps 1-4) until every beam is finished or the budget is spent:
        the final beams, the extras, the rounds. One read per iteration: its outcome's summary (with stop
        strings, also the beams' tokens)."""
        dev = self.device
        clock = StepClock(dev, self.sync_timing)
        tcache, dcache = new_cache(self.target.model), new_cache(self.draft.model)
        zero = torch.zeros(1, device=dev)
        beams = _Beams(tokens=torch.empty((1, 0), dtype=torch.long, device=dev), target_pending=prompt_ids,
                       logp=zero, q_logp=zero, finished=torch.zeros(1, dtype=torch.bool, device=dev),
                       length=torch.zeros(1, dtype=torch.long, device=dev), pending=prompt_ids)
        widths, drafts_accepted, peak_rows, peak_bytes, betas, rounds = [], [], 1, 0, [], []
        done = False
        while beams.tokens.size(1) < max_new_tokens and not done:
            gamma = min(self.params.gamma, max_new_tokens - beams.tokens.size(1) - 1)
            with clock.drafting():
                forest = self._draft(dcache, beams, gamma, generator) if gamma else _Forest([])
            with clock.verifying():
                self._target_forward(tcache, beams, forest)
                peak_bytes = max(peak_bytes, cache_bytes(tcache) + cache_bytes(dcache))
                out, read = self._verify(beams, forest, generator)
                summary = read.tolist()  # the iteration's one read
                steps, n_out, done = int(summary[0]), int(summary[1]), bool(summary[2])
                beams = self._advance(tcache, dcache, beams, forest, out.select(slice(0, n_out)), steps)
            if stopping.stop_strings:
                self._finish_stopped(beams, stopping)
                done = bool(beams.finished.all())
            draft_s, verify_s = clock.take()
            peak_rows = max(peak_rows, beams.tokens.size(0))
            committed = tuple(int(t) for t in summary[3 + 3 * gamma:][:steps - 1] + summary[-1:])
            rounds.append(Round(committed, gamma=gamma, accepted=steps - 1, draft_nodes=gamma * self.params.draft_width,
                                draft_time_s=draft_s, verify_time_s=verify_s))
            verified = min(steps, gamma)
            widths += [int(w) for w in summary[3:3 + verified]] + ([n_out] if steps > gamma else [])
            drafts_accepted += [int(a) for a in summary[3 + gamma:3 + gamma + verified]]
            betas += summary[3 + 2 * gamma:3 + 2 * gamma + verified]
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
        loop ends when every beam has finished, so no iteration runs past the stop. Reads the beams (only
        with stop strings)."""
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
        """Draft beam sampling (Eq. 1 with q), width W_S, γ steps; layers < γ are fed in forest slots."""
        W_S, warp, eos = self.params.draft_width, self.params.warp, self.eos_sentinel
        logits = self.draft(beams.pending, dcache)
        if beams.deferred_finished is not None:  # complete q(x_{1:t}) with the last pending token
            joint = beam_joint_logprobs(beams.q_logp, torch.log_softmax(logits[:, -2], -1), beams.deferred_finished,
                                        eos)
            beams.q_logp = joint.gather(1, beams.pending[:, -1:]).squeeze(1)
            beams.deferred_finished = None
        forest = _Forest([], draft_prefix=cache_length(dcache), root_logq=torch.log_softmax(logits[:, -1], -1))
        rows, dtype = beams.tokens.size(0), next(self.draft.model.parameters()).dtype
        q_logp, next_logq, finished = beams.q_logp, forest.root_logq, beams.finished
        tree = torch.arange(rows, device=self.device)
        anc: torch.Tensor | None = None
        slot = torch.arange(W_S, device=self.device)
        for d in range(gamma):
            joint = beam_joint_logprobs(q_logp, next_logq, finished, eos)
            q_flat = beam_distribution(joint, warp)
            ext = extend(joint, sample(q_flat, generator, W_S), finished, eos)
            anc = ancestors(anc, ext.parent)
            layer = ForestLayer(parent=ext.parent, token=ext.token, tree=tree[ext.parent], q_flat=q_flat,
                                q_logp=ext.logp, finished=ext.finished, ancestors=anc)
            forest.layers.append(layer)
            if d == gamma - 1:
                break  # the last layer's children are never needed from the draft
            mask = forest_mask(forest.draft_prefix, 0, slot_visibility(anc, W_S, d + 1), dtype)
            pos = forest_positions(forest.draft_prefix + d, 0, torch.zeros_like(slot))
            logits = self.draft(ext.token.expand(rows, W_S), dcache, position_ids=pos.expand(rows, -1),
                                attention_mask=mask.expand(rows, -1, -1, -1))
            layer.draft_next_logq = torch.log_softmax(logits[layer.tree, slot], -1)
            q_logp, next_logq, finished, tree = layer.q_logp, layer.draft_next_logq, layer.finished, layer.tree
        return forest

    # ---------------------------------------------------------------- 2. forest-based parallel decoding (§3.3)
    def _target_forward(self, tcache, beams: _Beams, forest: _Forest) -> None:
        """ONE target call: every input beam's pending token(s) and the whole forest (fixed slots), in that
        beam's cache row; each beam's p is read in its own root's row."""
        rows, stem, W_S = beams.tokens.size(0), beams.target_pending.size(1), self.params.draft_width
        layers = forest.layers
        n = len(layers) * W_S
        visible = (torch.cat([slot_visibility(layer.ancestors, W_S, len(layers)) for layer in layers]) if layers
                   else torch.zeros((0, 0), dtype=torch.bool, device=self.device))
        forest.target_prefix = cache_length(tcache)
        dtype = next(self.target.model.parameters()).dtype
        mask = forest_mask(forest.target_prefix, stem, visible, dtype)
        pos = forest_positions(forest.target_prefix, stem, torch.arange(n, device=self.device) // W_S)
        ids = torch.cat([beams.target_pending] + [layer.token.expand(rows, W_S) for layer in layers], dim=1)
        logits = self.target(ids, tcache, position_ids=pos.expand(rows, -1),
                             attention_mask=mask.expand(rows, -1, -1, -1))
        forest.target_prefix += stem  # the input beams are complete in the cache; the forest follows
        logp = torch.log_softmax(logits, -1)
        forest.root_logp = logp[:, stem - 1]
        slot = torch.arange(W_S, device=self.device)
        for d, layer in enumerate(layers):
            layer.target_next_logp = logp[layer.tree, stem + d * W_S + slot]

    # ---------------------------------------------------------------- 3. verification (Algorithm 1)
    def _verify(self, beams: _Beams, forest: _Forest, generator) -> tuple[Outcome, torch.Tensor]:
        """Verify the forest on the device (:func:`~harness.primitives.forest_verify.verify_forest`)."""
        p = self.params
        rule = ForestRule(p.warp, self.eos_sentinel, p.draft_width, p.width, p.threshold, p.min_width,
                          p.memory_constrained)
        front = Frontier.of_inputs(beams.logp, beams.finished, beams.length, forest.root_logp)
        return verify_forest(front, forest.layers, rule, generator)

    # ---------------------------------------------------------------- 4. keep caches of the output beams
    def _advance(self, tcache, dcache, beams: _Beams, forest: _Forest, out: Outcome, steps: int) -> _Beams:
        """The output beams (``out``) become the next input beams: scores, tokens, and both caches gathered per
        output beam (its input beam's row, plus the cached slots of its path through the forest)."""
        assert forest.root_logp is not None
        vocab, eos, layers, W_S = forest.root_logp.size(-1), self.eos_sentinel, forest.layers, self.params.draft_width
        token, logp, length, parent_finished = out.outcomes % vocab, out.logp, out.length, out.parent_finished
        parent = out.parent  # index within layer `depth` (0 = the input beams)
        depth, n = steps - 1, parent
        path: list[torch.Tensor] = [parent] * depth  # slot per layer 1..depth
        for d in range(depth, 0, -1):
            path[d - 1] = n
            n = layers[d - 1].parent[n]
        rows, count = n, token.numel()  # the input beam (cache row) of each output beam

        def keep(prefix: int, upto: int) -> torch.Tensor:  # the row's prefix, then its path's slots
            slots = [prefix + d * W_S + path[d] for d in range(upto)]
            return torch.cat([torch.arange(prefix, device=self.device).expand(count, prefix)]
                             + [s[:, None] for s in slots], dim=1)

        path_tokens = [layers[d].token[path[d]][:, None] for d in range(depth)]
        gather_positions(tcache, rows, keep(forest.target_prefix, depth))
        new = _Beams(tokens=torch.cat([beams.tokens[rows], *path_tokens, token[:, None]], dim=1),
                     target_pending=token[:, None], logp=logp, q_logp=torch.full_like(logp, float("nan")),
                     finished=parent_finished | (token == eos), length=length, pending=token[:, None])
        if not layers:
            return new  # γ = 0 only for the final token: the draft is never called again (q_logp untracked)
        gather_positions(dcache, rows, keep(forest.draft_prefix, min(depth, len(layers) - 1)))
        seen = layers[depth - 1].draft_next_logq if depth else forest.root_logq  # log q(· | parent), if fed
        if seen is None:  # parents are layer-γ drafts, unseen by the draft
            new.q_logp = layers[depth - 1].q_logp[parent]
            new.pending = torch.stack([layers[depth - 1].token[parent], token], dim=1)
            new.deferred_finished = parent_finished
        else:
            next_logq = seen[parent]
            prev_q = layers[depth - 1].q_logp[parent] if depth else beams.q_logp[parent]
            new.q_logp = beam_joint_logprobs(prev_q, next_logq, parent_finished, eos).gather(
                1, token[:, None]).squeeze(1)
        return new
