"""Deterministic beam search (dsbd §2.1, "deterministic beam sampling": keep the top W).

Follows HF transformers' vectorised beam search exactly, so that the output is token-identical
to ``generate(num_beams=W, do_sample=False, length_penalty=..., early_stopping=...)``:
2W candidates per step, finished hypotheses scored sum-log-prob ÷ generated_length^length_penalty,
HF's early-stopping heuristic, and the prompt prefilled once per beam row.
"""
from __future__ import annotations

import torch

from harness.decoders.base import Beam, DecodeRequest, Decoded, Decoder, register
from harness.decoders.params.beam_search import BeamSearchParams
from harness.primitives.kv_cache import new_cache, reorder

NEG = -1.0e9


@register
class BeamSearch(Decoder[BeamSearchParams]):
    method = "beam_search"
    decodings = ("greedy",)

    def _decode(self, request: DecodeRequest) -> Decoded:
        """HF's beam search; long because it follows transformers' vectorised beam search step by step (its steps
        e-g, the same names), so the two read side by side and stay token-identical."""
        prompt_ids, max_new_tokens, stopping = request.prompt_ids, request.max_new_tokens, request.stop
        W, lp, early = self.params.width, self.params.length_penalty, self.params.early_stopping
        K = 2 * W  # HF keeps (1 + #eos) * W candidates, at least 2W
        dev = self.device
        prompt_len = prompt_ids.size(1)
        max_length = prompt_len + max_new_tokens
        cache = new_cache(self.target.model)
        logits = self.target(prompt_ids.expand(W, -1), cache, all_logits=False)[:, -1]

        running = torch.empty((W, 0), dtype=torch.long, device=dev)
        running_scores = torch.full((W,), NEG, device=dev)
        running_scores[0] = 0.0
        finished = torch.zeros((W, max_new_tokens), dtype=torch.long, device=dev)
        finished_len = torch.zeros(W, dtype=torch.long, device=dev)
        finished_scores = torch.full((W,), NEG, device=dev)
        is_finished = torch.zeros(W, dtype=torch.bool, device=dev)
        improvable = torch.ones((), dtype=torch.bool, device=dev)  # kept on the device: one read per step
        top_w_mask = torch.arange(K, device=dev) < W
        cur_len = prompt_len
        while True:
            log_probs = torch.log_softmax(logits, dim=-1) + running_scores[:, None]
            vocab = log_probs.size(-1)
            top_scores, top_idx = torch.topk(log_probs.reshape(1, -1), K)
            top_scores, top_idx = top_scores[0], top_idx[0]
            parent, token = top_idx // vocab, top_idx % vocab
            candidates = torch.cat([running[parent], token[:, None]], dim=1)
            if cur_len + 1 >= max_length:  # every candidate is finished at the length limit
                hits = torch.ones_like(token, dtype=torch.bool)
            else:
                hits = token == (self.eos_token_id if self.eos_token_id is not None else -1)
            if stopping.stop_strings:  # a candidate whose text completes a stop string is finished, like EOS
                hits = hits | torch.tensor(stopping.rows_stopped(candidates.tolist()), device=dev)

            # e. the W best unfinished candidates continue
            masked = top_scores + hits.float() * NEG
            keep = torch.topk(masked, W).indices
            running, running_scores, beam_idx = candidates[keep], masked[keep], parent[keep]

            # f. finished candidates among the top W enter the finished set if they beat it
            gen_len = cur_len + 1 - prompt_len
            fin = top_scores / (gen_len ** lp)
            if early is True:  # NEG added where the flags say so (x + 0.0 is x: the same scores as HF's branches)
                fin = fin + is_finished.all().float() * NEG
            fin = fin + (~improvable).float() * NEG
            fin = fin + (~(hits & top_w_mask)).float() * NEG
            merged_scores = torch.cat([finished_scores, fin])
            pick = torch.topk(merged_scores, W).indices
            padded = torch.zeros((K, max_new_tokens), dtype=torch.long, device=dev)
            padded[:, :gen_len] = candidates
            finished = torch.cat([finished, padded])[pick]
            finished_len = torch.cat([finished_len, torch.full((K,), gen_len, device=dev)])[pick]
            finished_scores = merged_scores[pick]
            is_finished = torch.cat([is_finished, hits & top_w_mask])[pick]

            # g. stopping conditions, as HF evaluates them
            cur_len += 1
            best_len = (max_length - prompt_len) if (early == "never" and lp > 0.0) else (cur_len - prompt_len)
            best_running = running_scores[0] / (best_len ** lp)
            worst_finished = torch.where(is_finished, finished_scores.min(), NEG)
            improvable = improvable & (best_running > worst_finished).any()
            stop = ~improvable | hits.all()
            if early is True:
                stop = stop | is_finished.all()
            if bool(stop):  # the step's one read
                break
            reorder(cache, beam_idx)
            logits = self.target(running[:, -1:], cache)[:, -1]
        rows = finished.tolist()  # the final reads: the tokens, then the numbers (exact in the scores' dtype)
        n, done, scores = torch.stack([finished_len.to(finished_scores.dtype), is_finished.to(finished_scores.dtype),
                                       finished_scores]).tolist()
        lengths = [int(x) for x in n]
        beams = [Beam(rows[i][:lengths[i]], logp=scores[i] * lengths[i] ** lp, score=scores[i])
                 for i in range(W) if done[i]]  # HF's order: best score first
        return Decoded(rows[0][:lengths[0]], beams=beams)
