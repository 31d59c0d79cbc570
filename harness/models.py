"""Loading draft/target model pairs: any HF causal LM by hub id or local directory.

The embedded default is the project's own tiny Llama pair in ``harness/assets/tiny_pair``
(trained by ``scripts/train_tiny_pair.py``), which loads offline.
"""
from __future__ import annotations

from dataclasses import dataclass, field, replace
from pathlib import Path

import torch

from harness.errors import ConfigError, HarnessError, TokenizerMismatchError

TINY_PAIR_DIR = Path(__file__).parent / "assets" / "tiny_pair"
DTYPES = {"float32": torch.float32, "float16": torch.float16, "bfloat16": torch.bfloat16}


@dataclass
class ModelPair:
    """A target model, an optional draft model, and their shared tokenizer.

    ``drafts`` maps every loaded draft's id to its model (seed 004 §5: drafts to select from, all
    sharing the target's tokenizer); ``draft``/``draft_id`` is the default one (the first).
    """

    target: torch.nn.Module
    draft: torch.nn.Module | None
    tokenizer: object
    name: str = "custom"
    target_id: str = ""
    draft_id: str | None = None
    dtype: str = "float32"
    meta: dict = field(default_factory=dict)
    drafts: dict = field(default_factory=dict)

    def __post_init__(self):
        if self.draft is not None and not self.drafts:
            self.drafts = {self.draft_id or "draft": self.draft}

    def with_draft(self, draft_id: str) -> "ModelPair":
        """The same pair (same target, tokenizer and loaded drafts) with ``draft_id`` as its draft."""
        if draft_id not in self.drafts:
            raise ConfigError(f"pair '{self.name}' has no draft '{draft_id}'; loaded drafts: {', '.join(self.drafts)}")
        return replace(self, draft=self.drafts[draft_id], draft_id=draft_id)

    @property
    def device(self) -> torch.device:
        return self.target.device

    @property
    def vocab_size(self) -> int:
        """Logit width both models share (embeddings may be padded beyond the tokenizer)."""
        sizes = [self.target.config.vocab_size] + ([self.draft.config.vocab_size] if self.draft is not None else [])
        return min(sizes)

    def require_draft(self, method: str) -> torch.nn.Module:
        if self.draft is None:
            raise ConfigError(f"method '{method}' needs a draft model, but pair '{self.name}' has none (set pair.draft)")
        return self.draft

    def cuda_devices(self) -> list[int]:
        """Indices of the CUDA devices holding any parameter of either model (for energy sums)."""
        devs = set()
        for m in (self.target, self.draft):
            if m is None:
                continue
            for p in m.parameters():
                if p.device.type == "cuda":
                    devs.add(p.device.index or 0)
        return sorted(devs)


def resolve_device(device: str) -> str:
    if device == "auto":
        return "cuda" if torch.cuda.is_available() else "cpu"
    if device.startswith("cuda") and not torch.cuda.is_available():
        raise ConfigError(f"device '{device}' requested but no CUDA device is available (use device=cpu or auto)")
    return device


def resolve_model_path(name_or_path: str) -> str:
    """``tiny/target`` and ``tiny/draft`` name the embedded pair; anything else goes to HF as is."""
    if name_or_path.startswith("tiny/"):
        return str(TINY_PAIR_DIR / name_or_path.split("/", 1)[1])
    return name_or_path


def load_model(name_or_path: str, dtype: str = "float32", device: str = "auto", device_map=None,
               attn_implementation: str | None = None):
    from transformers import AutoModelForCausalLM

    if dtype not in DTYPES:
        raise ConfigError(f"unknown dtype '{dtype}'; valid: {', '.join(DTYPES)}")
    kwargs = {"dtype": DTYPES[dtype]}
    if attn_implementation:
        kwargs["attn_implementation"] = attn_implementation
    if device_map:
        kwargs["device_map"] = device_map
    try:
        model = AutoModelForCausalLM.from_pretrained(resolve_model_path(name_or_path), **kwargs)
    except OSError as e:
        raise HarnessError(f"could not load model '{name_or_path}': {e}") from e
    if not device_map:
        model.to(resolve_device(device))
    model.eval()
    return model


def load_tokenizer(name_or_path: str):
    from transformers import AutoTokenizer

    return AutoTokenizer.from_pretrained(resolve_model_path(name_or_path))


def check_tokenizers(target_tok, draft_tok, target_id: str = "target", draft_id: str = "draft") -> None:
    """Refuse a pair whose tokenizers map text to different ids (before any generation)."""
    tv, dv = target_tok.get_vocab(), draft_tok.get_vocab()
    problems = []
    if tv != dv:
        only_t = sorted(set(tv) - set(dv))[:5]
        only_d = sorted(set(dv) - set(tv))[:5]
        moved = sorted(k for k in set(tv) & set(dv) if tv[k] != dv[k])[:5]
        problems.append(f"vocabularies differ (sizes {len(tv)} vs {len(dv)}; only in target: {only_t}; "
                        f"only in draft: {only_d}; different ids: {moved})")
    for attr in ("bos_token_id", "eos_token_id"):
        a, b = getattr(target_tok, attr, None), getattr(draft_tok, attr, None)
        if a != b:
            problems.append(f"{attr} differs ({a} vs {b})")
    if problems:
        raise TokenizerMismatchError(
            f"draft '{draft_id}' and target '{target_id}' do not share a tokenizer: " + "; ".join(problems)
            + ". Speculative methods need identical token ids; pick a draft from the target's family.")


def load_pair(target: str = "tiny/target", draft: str | None = "tiny/draft", *, name: str | None = None,
              dtype: str = "float32", device: str = "auto", device_map=None, draft_device_map=None,
              attn_implementation: str | None = None, drafts: list[str] | None = None) -> ModelPair:
    """Load tokenizers first and check them, then the models. The target's tokenizer is used.

    ``drafts``: several drafts to select from (each checked against the target's tokenizer, each
    loaded once); ``draft`` is the default and must be one of them (None: the first).
    """
    draft_ids = list(dict.fromkeys(drafts or ([draft] if draft else [])))
    if drafts is not None and not draft_ids:
        raise ConfigError("pair.drafts is empty; list at least one draft or leave it out")
    if drafts and draft is None:
        draft = draft_ids[0]
    if draft and draft not in draft_ids:
        raise ConfigError(f"pair.draft '{draft}' is not among pair.drafts {draft_ids}")
    tokenizer = load_tokenizer(target)
    for d in draft_ids:
        check_tokenizers(tokenizer, load_tokenizer(d), target, d)
    target_model = load_model(target, dtype, device, device_map, attn_implementation)
    draft_device = str(target_model.device) if not draft_device_map else device
    loaded = {d: load_model(d, dtype, draft_device, draft_device_map, attn_implementation) for d in draft_ids}
    if tokenizer.pad_token_id is None:
        tokenizer.pad_token = tokenizer.eos_token
    return ModelPair(target=target_model, draft=loaded.get(draft), tokenizer=tokenizer, name=name or "custom",
                     target_id=target, draft_id=draft, dtype=dtype, drafts=loaded)
