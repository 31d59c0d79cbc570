"""A local judge: any HF causal LM (hub id, local directory or an embedded ``tiny/<name>`` model), decoding
with HF ``generate`` — greedy at temperature 0 (FastChat's judge setting), else sampling.

The judge prompt goes through the tokenizer's chat template when it has one; otherwise it is the plain
Vicuna v1.1 conversation the harness uses for chat prompts (``<system> USER: <prompt> ASSISTANT:``). The
messages' text is data: special-token text inside it (an answer holding ``<|im_end|>`` or ``</s>``) is
tokenized as plain text, never as the control token (only the template's own tokens are special). A
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

        if not cfg.model:
            raise JudgeFailure("judge.model: the hf judge needs a model (a hub id or a local directory)")
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

    def encode(self, messages: list[dict]) -> list[int]:
        """The judge's input ids: the template's text tokenized with its special tokens, each message's text as
        plain text (``split_special_tokens``): an answer cannot close its turn or open the judge's."""
        import re
        import secrets

        nonce = secrets.token_hex(8)
        marks = [f"@@content-{i}-{nonce}@@" for i in range(len(messages))]
        text, chat = self.render([{**m, "content": mark} for m, mark in zip(messages, marks)])
        contents = dict(zip(marks, (m["content"] for m in messages)))
        if not chat:  # the plain conversation holds no control token but the tokenizer's own BOS: all data
            plain = re.sub("|".join(map(re.escape, marks)), lambda m: contents[m.group(0)], text)
            return self.tokenizer(plain, add_special_tokens=True, split_special_tokens=True)["input_ids"]
        ids = []
        for piece in re.split("(" + "|".join(map(re.escape, marks)) + ")", text):
            if piece:
                ids += self.tokenizer(contents.get(piece, piece), add_special_tokens=False,
                                      split_special_tokens=piece in contents)["input_ids"]
        return ids

    def complete(self, messages: list[dict]) -> str:
        ids = torch.tensor([self.encode(messages)], device=self.model.device)
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
