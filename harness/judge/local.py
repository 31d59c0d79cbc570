"""A local judge: any HF causal LM (hub id, local directory or an embedded ``tiny/<name>`` model), decoding
with HF ``generate`` — greedy at temperature 0 (FastChat's judge setting), else sampling.

The judge prompt goes through the tokenizer's chat template when it has one; otherwise it is the plain
Vicuna v1.1 conversation the harness uses for chat prompts (``<system> USER: <prompt> ASSISTANT:``). A
prompt longer than the judge's context is a failure with that reason (a judge that cannot read the whole
answer does not grade it); the answer is cut to fit the context.
"""
from __future__ import annotations

import torch

from harness.judge.client import JudgeFailure
from harness.judge.config import JudgeConfig


class LocalJudge:
    def __init__(self, cfg: JudgeConfig):
        from harness.models import load_model, load_tokenizer, resolve_dtype

        self.cfg = cfg
        self.tokenizer = load_tokenizer(cfg.model)
        self.model = load_model(cfg.model, resolve_dtype(cfg.dtype, cfg.model, cfg.device), cfg.device)
        self.context = getattr(self.model.config, "max_position_embeddings", None)

    def render(self, messages: list[dict]) -> tuple[str, bool]:
        """The judge's input text, and whether it is a chat-template rendering (with its own special tokens)."""
        if getattr(self.tokenizer, "chat_template", None):
            return self.tokenizer.apply_chat_template(messages, tokenize=False, add_generation_prompt=True), True
        system = " ".join(m["content"] for m in messages if m["role"] == "system")
        user = "\n\n".join(m["content"] for m in messages if m["role"] == "user")
        return f"{system} USER: {user} ASSISTANT:".lstrip(), False

    def complete(self, messages: list[dict]) -> str:
        text, chat = self.render(messages)
        ids = self.tokenizer(text, add_special_tokens=not chat, return_tensors="pt")["input_ids"].to(self.model.device)
        n = int(ids.shape[1])
        budget = int(self.cfg.max_tokens)
        if self.context:
            if n >= self.context:
                raise JudgeFailure(f"the judge prompt has {n} tokens; the judge model's context is {self.context}")
            budget = min(budget, self.context - n)
        sample = self.cfg.temperature > 0
        pad = self.tokenizer.pad_token_id if self.tokenizer.pad_token_id is not None else self.tokenizer.eos_token_id
        with torch.inference_mode():
            out = self.model.generate(ids, attention_mask=torch.ones_like(ids), max_new_tokens=budget,
                                      do_sample=sample, temperature=self.cfg.temperature if sample else None,
                                      top_k=None, top_p=None, pad_token_id=pad)
        return self.tokenizer.decode(out[0, n:], skip_special_tokens=True)

    def close(self) -> None:
        """Free the model (and its GPU memory) once the judging is done."""
        self.model = None
        if torch.cuda.is_available():
            torch.cuda.empty_cache()
