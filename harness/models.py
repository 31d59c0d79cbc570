"""Loading draft/target model pairs: any HF causal LM by hub id or local directory.

The embedded default is the project's own tiny Llama pair in ``harness/assets/tiny_pair``
(trained by ``scripts/train_tiny_pair.py``), which loads offline.

A pair config is checked as a whole (:class:`PairSpec`) before any weights load: model references
(a local directory must exist; otherwise a well-formed hub id), dtype and device names, and then the
two tokenizers (:func:`check_tokenizers`). ``dtype: auto`` is the checkpoint's own dtype, except
bfloat16 on a GPU without bf16 support (→ float16) and float16 on a CPU (→ float32: CPUs have no
fast half-precision kernels).
"""
from __future__ import annotations

import dataclasses
import re
from contextlib import contextmanager
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Any, Mapping

import torch

from harness.primitives import random_pair
from harness.errors import ConfigError, HarnessError, TokenizerMismatchError
from harness.primitives.graphs import (DEFAULT_EXECUTION, check_execution, execution_facts, execution_of,
                                       set_execution)

TINY_PAIR_DIR = Path(__file__).parent / "assets" / "tiny_pair"
# the embedded models: every folder of assets/tiny_pair with a config (target, draft, draft4, ...)
TINY_MODELS = tuple(f"tiny/{d.name}" for d in sorted(TINY_PAIR_DIR.iterdir(), key=lambda d: (d.name != "target", d))
                    if (d / "config.json").is_file())
DTYPES = {"float32": torch.float32, "float16": torch.float16, "bfloat16": torch.bfloat16}
DTYPE_CHOICES = ("auto", *DTYPES)
DEVICE_PATTERN = re.compile(r"^(auto|cpu|mps|cuda(:\d+)?)$")


@dataclass
class ModelPair:
    """A target model, an optional draft model, and their shared tokenizer.

    ``drafts`` maps every loaded draft's id to its model (adaptive §5: drafts to select from, all
    sharing the target's tokenizer); ``draft``/``draft_id`` is the default one (the first).
    """

    target: torch.nn.Module
    draft: torch.nn.Module | None
    tokenizer: Any  # a transformers tokenizer (PreTrainedTokenizerBase; its package is not type-checked here)
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
        return min(sizes + ([self.meta["vocab_limit"]] if self.meta.get("vocab_limit") else []))

    @property
    def execution(self) -> str:  # eager | graphs (harness.primitives.graphs)
        return execution_of(self.target)

    def execution_facts(self) -> dict:
        """The execution mode and its runners' counters, as a summary records them (:func:`execution_facts`)."""
        return execution_facts({"target": self.target, "draft": self.draft})

    def set_execution(self, mode: str) -> ModelPair:
        """Run every model of the pair (target and each loaded draft) in ``mode`` from now on; returns the pair."""
        for model in {id(m): m for m in (self.target, self.draft, *self.drafts.values()) if m is not None}.values():
            set_execution(model, mode)
        self.meta["execution"] = mode
        return self

    def require_draft(self, method: str) -> torch.nn.Module:
        if self.draft is None:
            raise ConfigError(f"method '{method}' needs a draft model; pair '{self.name}' has none (set pair.draft)")
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


def check_model_ref(key: str, ref: str | None) -> None:
    """A model reference is the embedded pair, an existing local directory, or a well-formed hub id."""
    if not isinstance(ref, str) or not ref:
        raise ConfigError(f"{key} must be a hub id or a local directory, got {ref!r}", key=key)
    if random_pair.is_random(ref):
        random_pair.parse(ref, key)
        return
    if ref.startswith("tiny/"):
        if ref not in TINY_MODELS:
            raise ConfigError(f"{key}: unknown embedded model '{ref}'. Valid: {', '.join(TINY_MODELS)}", key=key)
        return
    path = Path(ref).expanduser()
    if path.is_dir():
        return
    # a path (absolute, relative with ./ or ../, several levels, or under an existing local folder) is
    # reported as a missing directory, never as a malformed hub id
    looks_like_path = (ref.startswith(("/", "./", "../", "~")) or ref.count("/") > 1 or "\\" in ref
                       or ("/" in ref and Path(ref.split("/")[0]).expanduser().is_dir()))
    if path.exists():
        raise ConfigError(f"{key}: '{ref}' is a file, not a model directory", key=key)
    if looks_like_path:
        raise ConfigError(f"{key}: directory not found: {ref}", key=key)
    from huggingface_hub.utils import HFValidationError, validate_repo_id

    try:
        validate_repo_id(ref)
    except HFValidationError as e:
        raise ConfigError(f"{key}: '{ref}' is no local directory (not found) and no valid hub id "
                          f"(namespace/name): {e}", key=key) from e


@dataclass(frozen=True)
class PairSpec:
    """A pair config, validated as a whole before any weights load (keys, model references, dtype, device)."""

    target: str = "tiny/target"
    draft: str | None = "tiny/draft"
    name: str | None = None
    dtype: str = "auto"  # auto | float32 | float16 | bfloat16
    device: str = "auto"  # auto | cpu | cuda | cuda:N | mps
    device_map: Any = None
    draft_device_map: Any = None
    attn_implementation: str | None = None
    drafts: list[str] | None = None  # several drafts to select from (adaptive §5); draft = the default one
    revision: str | None = None  # the target's hub revision (commit, tag or branch); null = the default branch
    draft_revision: str | None = None  # the drafts' hub revision; null = the default branch
    execution: str = DEFAULT_EXECUTION  # eager | graphs: static caches and captured shapes (harness.primitives.graphs)

    def __post_init__(self):
        check_execution(self.execution)
        if self.execution == "graphs" and (self.device_map or self.draft_device_map):  # static caches: one device
            raise ConfigError("pair.execution=graphs cannot be combined with device_map", key="pair.execution")
        check_model_ref("pair.target", self.target)
        if self.drafts is not None:
            if not list(self.drafts):
                raise ConfigError("pair.drafts is empty; list at least one draft or leave it out", key="pair.drafts")
            for i, d in enumerate(self.drafts):
                check_model_ref(f"pair.drafts[{i}]", d)
            if self.draft is None:
                object.__setattr__(self, "draft", list(self.drafts)[0])
            elif self.draft not in self.drafts:
                raise ConfigError(f"pair.draft '{self.draft}' is not among pair.drafts {list(self.drafts)}",
                                  key="pair.draft")
        if self.draft:
            check_model_ref("pair.draft", self.draft)
        random_pair.check_pair(self.target, self.draft_ids)
        if self.dtype not in DTYPE_CHOICES:
            raise ConfigError(f"unknown pair.dtype '{self.dtype}'. Valid: {', '.join(DTYPE_CHOICES)}", key="pair.dtype")
        if not isinstance(self.device, str) or not DEVICE_PATTERN.match(self.device):
            raise ConfigError(f"unknown pair.device '{self.device}'. Valid: auto, cpu, cuda, cuda:N, mps",
                              key="pair.device")
        resolve_device(self.device)
        for key in ("revision", "draft_revision"):
            value = getattr(self, key)
            if value is not None and (not isinstance(value, str) or not value.strip()):
                raise ConfigError(f"pair.{key} must be a hub revision (a commit, tag or branch) or null, got {value!r}")

    @property
    def draft_ids(self) -> list[str]:
        """Every draft to load, the default first when ``drafts`` is not given."""
        return list(dict.fromkeys(self.drafts or ([self.draft] if self.draft else [])))

    @classmethod
    def from_config(cls, cfg: Mapping[str, Any]) -> PairSpec:
        """From a ``pair`` config; an unknown key fails with the valid keys."""
        valid = [f.name for f in dataclasses.fields(cls)]
        unknown = sorted(set(cfg) - set(valid))
        if unknown:
            raise ConfigError(f"unknown pair key(s) {unknown}. Valid keys: {', '.join(valid)}", key="pair")
        return cls(**cfg)


def checkpoint_dtype(name_or_path: str) -> str:
    """The dtype a checkpoint's config declares (float32 when it declares none)."""
    from transformers import AutoConfig

    if random_pair.is_random(name_or_path):
        return "float16"  # built in half precision (float32 on a CPU: resolve_dtype)
    config = AutoConfig.from_pretrained(resolve_model_path(name_or_path))
    declared = getattr(config, "dtype", None) or getattr(config, "torch_dtype", None)
    name = str(declared).replace("torch.", "") if declared is not None else "float32"
    return name if name in DTYPES else "float32"


def resolve_dtype(dtype: str, name_or_path: str, device: str) -> str:
    """``auto`` → the checkpoint's dtype (bfloat16 → float16 on a GPU without bf16; float16 → float32 on a CPU)."""
    if dtype != "auto":
        if dtype not in DTYPES:
            raise ConfigError(f"unknown dtype '{dtype}'; valid: {', '.join(DTYPE_CHOICES)}")
        return dtype
    resolved = checkpoint_dtype(name_or_path)
    device = resolve_device(device)
    if device.startswith("cuda") and resolved == "bfloat16" and not torch.cuda.is_bf16_supported():
        return "float16"
    if device == "cpu" and resolved == "float16":
        return "float32"
    return resolved


@contextmanager
def progress_bars(enabled: bool):
    """Show (or silence) transformers' and the hub's progress bars, e.g. "Loading weights", inside the block."""
    from transformers.utils import logging as hf_logging

    was = hf_logging.is_progress_bar_enabled()
    (hf_logging.enable_progress_bar if enabled else hf_logging.disable_progress_bar)()
    try:
        yield
    finally:
        (hf_logging.enable_progress_bar if was else hf_logging.disable_progress_bar)()


def resolve_device(device: str) -> str:
    if device == "auto":
        return "cuda" if torch.cuda.is_available() else "cpu"
    if device.startswith("cuda") and not torch.cuda.is_available():
        raise ConfigError(f"device '{device}' requested but no CUDA device is available (use device=cpu or auto)",
                          key="pair.device")
    return device


def resolve_model_path(name_or_path: str) -> str:
    """``tiny/<name>`` (target, draft, draft4) names an embedded model; anything else goes to HF as is."""
    if name_or_path.startswith("tiny/"):
        return str(TINY_PAIR_DIR / name_or_path.split("/", 1)[1])
    return name_or_path


HUB_PROBE_TIMEOUT_S = 3.0  # one probe of the hub per process, before any model loads (never the hub client's retries)
_HUB_REACHABLE: dict[str, str | None] = {}


def is_hub_ref(ref: str) -> bool:
    """Whether a model reference goes to the hub: neither an embedded model nor an existing local directory."""
    return not ref.startswith("tiny/") and not random_pair.is_random(ref) and not Path(ref).expanduser().is_dir()


def hub_unreachable(timeout_s: float = HUB_PROBE_TIMEOUT_S) -> str | None:
    """Why the hub cannot be reached (None when it answers): ``HF_HUB_OFFLINE`` set, or one HEAD request to its
    endpoint failing within ``timeout_s``. Asked once per process (cached)."""
    from huggingface_hub import constants

    if constants.HF_HUB_OFFLINE:
        return "HF_HUB_OFFLINE is set"
    endpoint = constants.ENDPOINT
    if endpoint not in _HUB_REACHABLE:
        import urllib.error
        import urllib.request

        try:
            urllib.request.urlopen(urllib.request.Request(endpoint, method="HEAD"), timeout=timeout_s).close()
            _HUB_REACHABLE[endpoint] = None
        except urllib.error.HTTPError:  # it answered (any status): reachable
            _HUB_REACHABLE[endpoint] = None
        except (OSError, ValueError) as e:  # no route, DNS, refused, timed out, a malformed endpoint
            _HUB_REACHABLE[endpoint] = f"{endpoint} did not answer within {timeout_s:g} s ({type(e).__name__}: {e})"
    return _HUB_REACHABLE[endpoint]


def is_cached(ref: str, revision: str | None = None) -> bool:
    """Whether a hub model's config is in the local hub cache (``HF_HOME``/``HF_HUB_CACHE``), at ``revision``."""
    from huggingface_hub import try_to_load_from_cache

    try:
        return isinstance(try_to_load_from_cache(ref, "config.json", revision=revision), str)
    except Exception:  # noqa: BLE001 — a malformed id or revision: checked by PairSpec; not cached either way
        return False


def hub_problems(spec: PairSpec) -> list[tuple[str, str]]:
    """``(key, message)`` for every hub model of a pair that can be neither found in the local cache nor
    downloaded (the hub offline or unreachable), checked before anything loads: fails in seconds, where the
    hub client would retry for minutes."""
    refs = [("pair.target", spec.target, spec.revision)]
    refs += [("pair.draft" if d == spec.draft else "pair.drafts", d, spec.draft_revision) for d in spec.draft_ids]
    missing = [(key, ref) for key, ref, rev in refs if is_hub_ref(ref) and not is_cached(ref, rev)]
    why = hub_unreachable() if missing else None
    if not why:
        return []
    return [(key, f"{key}: '{ref}' is not in the local hub cache and the hub cannot be reached ({why}). Download it "
                  f"where there is network (`hf download {ref}`, same HF_HOME), or set {key} to a local directory")
            for key, ref in missing]


def load_model(name_or_path: str, dtype: str = "float32", device: str = "auto", device_map=None,
               attn_implementation: str | None = None, revision: str | None = None):
    from transformers import AutoModelForCausalLM

    if dtype not in DTYPES:
        raise ConfigError(f"unknown dtype '{dtype}'; valid: {', '.join(DTYPES)}")
    kwargs = {"dtype": DTYPES[dtype]}
    if attn_implementation:
        kwargs["attn_implementation"] = attn_implementation
    if device_map:
        kwargs["device_map"] = device_map
    if revision:
        kwargs["revision"] = revision
    try:
        model = AutoModelForCausalLM.from_pretrained(resolve_model_path(name_or_path), **kwargs)
    except OSError as e:
        raise HarnessError(f"could not load model '{name_or_path}': {e}") from e
    if not device_map:
        model.to(resolve_device(device))
    model.eval()
    return model


def load_tokenizer(name_or_path: str, revision: str | None = None):
    from transformers import AutoTokenizer

    if random_pair.is_random(name_or_path):
        name_or_path, revision = random_pair.TOKENIZER, None
    pinned = {"revision": revision} if revision else {}
    return AutoTokenizer.from_pretrained(resolve_model_path(name_or_path), **pinned)


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
              dtype: str = "auto", device: str = "auto", device_map=None, draft_device_map=None,
              attn_implementation: str | None = None, drafts: list[str] | None = None,
              revision: str | None = None, draft_revision: str | None = None, progress: bool = True,
              execution: str = DEFAULT_EXECUTION) -> ModelPair:
    """Check the config (:class:`PairSpec`), load tokenizers and check them, then the models (all in the
    target's resolved dtype). The target's tokenizer is used. ``progress=False`` silences loading bars.

    ``drafts``: several drafts to select from (adaptive §5; each checked against the target's tokenizer,
    each loaded once); ``draft`` is the default and must be one of them (None: the first). ``revision``
    and ``draft_revision`` pin the hub revisions of the target and the drafts (not used for local directories,
    whose content hash is recorded instead: :mod:`harness.results.provenance`). ``execution``: ``eager`` or
    ``graphs`` (:meth:`ModelPair.set_execution`).
    """
    spec = PairSpec(target=target, draft=draft, name=name, dtype=dtype, device=device, device_map=device_map,
                    draft_device_map=draft_device_map, attn_implementation=attn_implementation, drafts=drafts,
                    revision=revision, draft_revision=draft_revision, execution=execution)
    draft, draft_ids = spec.draft, spec.draft_ids
    with progress_bars(progress):
        tokenizer = load_tokenizer(target, revision)
        for d in draft_ids:
            check_tokenizers(tokenizer, load_tokenizer(d, draft_revision), target, d)
        resolved = resolve_dtype(dtype, target, device if not device_map else "auto")
        if random_pair.is_random(target):
            target_model = random_pair.build_target(target, DTYPES[resolved], resolve_device(device), len(tokenizer))
        else:
            target_model = load_model(target, resolved, device, device_map, attn_implementation, revision)
        draft_device = str(target_model.device) if not draft_device_map else device
        loaded = {d: random_pair.cut_draft(target_model, d) if random_pair.is_random(d)
                  else load_model(d, resolved, draft_device, draft_device_map, attn_implementation, draft_revision)
                  for d in draft_ids}
    if tokenizer.pad_token_id is None:
        tokenizer.pad_token = tokenizer.eos_token
    return ModelPair(target=target_model, draft=loaded.get(draft), tokenizer=tokenizer, name=spec.name or "custom",
                     target_id=target, draft_id=draft, dtype=resolved,
                     meta={"dtype_requested": dtype, "revision": revision, "draft_revision": draft_revision,
                           **({"vocab_limit": len(tokenizer)} if random_pair.is_random(target) else {})},
                     drafts=loaded).set_execution(execution)
