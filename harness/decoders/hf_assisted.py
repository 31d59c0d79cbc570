"""HF transformers assisted generation (``generate(assistant_model=draft)``) as a method of the sweep.

The library's own speculative decoding (greedy matching, or Leviathan et al. Alg. 1 when
sampling), run on the same pair, prompts and warping as our decoders, so the two can be
compared side by side. The candidate schedule is pinned by the parameters — γ tokens per
round (``num_assistant_tokens``), schedule ``constant`` and no confidence early stop by
default, i.e. the same drafting as our ``sd`` — and the installed transformers version and
its default schedule are recorded (they changed between versions; GUIDE §3).
Forward calls are counted with forward hooks; rounds are reported from the streamer (one ``put``
per round): γ_r is the number of draft forwards in that round (one drafted token each), the
committed tokens are the ones put. Draft/verify times are not measured (NaN).

With ``prompt_lookup_num_tokens`` set, the candidates come from HF's prompt lookup instead
(``generate(prompt_lookup_num_tokens=..., max_matching_ngram_size=...)``, no assistant model, no draft
loaded): the reference of our ``pld``. γ_r is then the candidates the target verified (its forward's
length less the committed tokens it was fed).
"""
from __future__ import annotations

import torch
import transformers
from transformers import GenerationConfig, StoppingCriteria, StoppingCriteriaList
from transformers.generation.streamers import BaseStreamer
from transformers.utils import logging as hf_logging

from harness.decoders.base import DecodeRequest, Decoded, Decoder, register
from harness.decoders.params.hf_assisted import HFAssistedParams
from harness.primitives.device import seed_from
from harness.primitives.round import Round
from harness.primitives.stopping import StopCondition

SCHEDULE_KEYS = ("num_assistant_tokens", "num_assistant_tokens_schedule", "assistant_confidence_threshold")


def hf_default_schedule() -> dict:
    """The installed transformers' defaults for the assistant's candidate schedule."""
    getter = getattr(GenerationConfig, "_get_default_generation_params", None)  # private; absent in some 5.x
    if getter is not None:
        defaults = getter()
        return {k: defaults.get(k) for k in SCHEDULE_KEYS}
    config = GenerationConfig()
    return {k: getattr(config, k, None) for k in SCHEDULE_KEYS}


class _RoundRecorder(BaseStreamer):
    """Collects every round of assisted generation (:attr:`rounds`): the tokens committed and
    the draft forwards spent (one drafted token each). It also applies the generation's stopping check
    (:class:`~harness.primitives.stopping.StopCondition`) to each round's tokens: a round that
    completes a stop string is recorded cut after it, and :attr:`done` tells ``generate``'s stopping
    criterion (:class:`_StopAfterRound`, asked right after the round) to end the generation."""

    def __init__(self, draft_counter: list[int], stopping: StopCondition | None = None):
        self.draft_counter = draft_counter
        self.rounds: list[Round] = []
        self.stopping = stopping
        self.prompt_seen = False
        self.last_draft_calls = 0
        self.out: list[int] = []
        self.done = False

    def put(self, value):
        if not self.prompt_seen:  # generate() streams the prompt first
            self.prompt_seen = True
            self.last_draft_calls = self.draft_counter[0]
            return
        committed = [int(t) for t in value.reshape(-1).tolist()]
        drafted = self.draft_counter[0] - self.last_draft_calls
        self.last_draft_calls = self.draft_counter[0]
        accepted = len(committed) - 1
        end = self.stopping.cut(self.out, committed) if self.stopping is not None and not self.done else None
        if end is not None:
            committed, accepted, self.done = committed[:end], min(accepted, end - 1), True
        self.out.extend(committed)
        self.rounds.append(Round(tuple(committed), gamma=drafted, accepted=accepted, draft_nodes=drafted))

    def end(self):
        pass


class _StopAfterRound(StoppingCriteria):
    """Ends ``generate`` once the round recorder's stopping check fired (stop strings inside the loop)."""

    def __init__(self, recorder: _RoundRecorder):
        self.recorder = recorder

    def __call__(self, input_ids, scores, **kwargs):
        return torch.full((input_ids.size(0),), self.recorder.done, dtype=torch.bool, device=input_ids.device)


def _hf_internal_deprecation(record) -> bool:
    """Drop HF's "Passing `generation_config` together with generation-related arguments is deprecated": we pass a
    config alone; HF's own assistant (``AssistedCandidateGenerator``) calls ``generate`` with its config and
    ``min_new_tokens``/``max_new_tokens`` on every round, which no caller can change. Other records pass."""
    return "together with generation-related" not in record.getMessage()


@register
class HFAssisted(Decoder[HFAssistedParams]):
    method = "hf_assisted"
    graphs_refusal = ("it runs HF generate's own loop with HF's own caches, which the harness's static caches and "
                      "captured graphs do not reach; run it with pair.execution=eager")
    uses_draft = True  # the assistant; none with prompt lookup (needs_draft)
    lossless = True

    @classmethod
    def needs_draft(cls, params: HFAssistedParams) -> bool:
        return params.prompt_lookup_num_tokens is None

    def _generation_config(self, max_new_tokens: int) -> tuple[GenerationConfig, dict]:
        """One :class:`GenerationConfig` holding every generation parameter (passed alone: HF deprecates a config
        together with generation arguments), and the model inputs that are no generation parameter."""
        p = self.params
        # The tokenizer's EOS, as for our decoders; without one, HF would fall back to the model
        # config's and stop early, so pass an id no token has (its warning is silenced in _decode).
        pad = self.pair.tokenizer.pad_token_id
        values = {"max_new_tokens": max_new_tokens, "eos_token_id": self.eos_sentinel,
                  "pad_token_id": pad if pad is not None else 0}
        if p.warp.is_greedy:
            values.update(do_sample=False, temperature=None, top_k=None, top_p=None)
        else:
            values.update(do_sample=True, temperature=p.temperature, top_k=p.top_k, top_p=p.top_p)
        inputs = {}
        if p.prompt_lookup_num_tokens is not None:
            values.update(prompt_lookup_num_tokens=p.prompt_lookup_num_tokens,
                          max_matching_ngram_size=p.max_matching_ngram_size or 2)
        else:
            inputs["assistant_model"] = self.draft.model
        return GenerationConfig(**values), inputs

    def _counting_hooks(self, prompt_len: int) -> tuple[list, dict[str, list[int]]]:
        """Forward hooks counting target and draft calls, and (prompt lookup) the candidates each target
        forward verified (``proposed``: its length less the committed tokens fed, the prompt at first, then 1)."""
        counts = {"target": [0], "draft": [0], "proposed": [0]}

        def on_target(module, args, kwargs, output):
            ids = kwargs.get("input_ids", args[0] if args else None)
            if ids is not None:
                counts["proposed"][0] += ids.size(1) - (prompt_len if counts["target"][0] == 0 else 1)
            counts["target"][0] += 1

        hooks = [self.target.model.register_forward_hook(on_target, with_kwargs=True)]
        if self.draft is not None:
            hooks.append(self.draft.model.register_forward_hook(
                lambda *_, c=counts["draft"]: c.__setitem__(0, c[0] + 1)))
        return hooks, counts

    def _set_schedule(self) -> dict:
        """Pin the assistant's candidate schedule for one call; returns the values to restore."""
        if self.draft is None:
            return {}
        p, cfg = self.params, self.draft.model.generation_config
        saved = {k: getattr(cfg, k, None) for k in SCHEDULE_KEYS}
        cfg.num_assistant_tokens = p.gamma
        cfg.num_assistant_tokens_schedule = p.schedule
        cfg.assistant_confidence_threshold = p.confidence_threshold
        return saved

    def _decode(self, request: DecodeRequest) -> Decoded:
        prompt_ids, generator = request.prompt_ids, request.generator
        hooks, counts = self._counting_hooks(prompt_ids.size(1))
        lookup = self.draft is None
        recorder = _RoundRecorder(counts["proposed" if lookup else "draft"], request.stop)
        saved = self._set_schedule()
        if generator is not None:  # HF samples from the global RNG: seed it from ours
            torch.manual_seed(seed_from(generator))
        verbosity = hf_logging.get_verbosity()
        if self.eos_token_id is None:
            hf_logging.set_verbosity_error()
        config, inputs = self._generation_config(request.max_new_tokens)
        generation_log = hf_logging.get_logger("transformers.generation.utils")
        generation_log.addFilter(_hf_internal_deprecation)
        try:
            with torch.inference_mode():
                out = self.target.model.generate(
                    prompt_ids, attention_mask=torch.ones_like(prompt_ids), streamer=recorder,
                    stopping_criteria=StoppingCriteriaList([_StopAfterRound(recorder)]),
                    generation_config=config, **inputs)
        finally:
            generation_log.removeFilter(_hf_internal_deprecation)
            hf_logging.set_verbosity(verbosity)
            for h in hooks:
                h.remove()
            for k, v in saved.items():
                setattr(self.draft.model.generation_config, k, v)
        self.target.calls += counts["target"][0]
        if self.draft is not None:
            self.draft.calls += counts["draft"][0]
        return Decoded(out[0, prompt_ids.size(1):].tolist(), rounds=recorder.rounds)

    def facts(self) -> dict:
        """The installed transformers and its default candidate schedule (it changed between versions)."""
        return {"transformers_version": transformers.__version__, "hf_default_schedule": hf_default_schedule()}
