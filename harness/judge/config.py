"""The judge's configuration: one typed dataclass, the Hydra config group ``judge`` (presets ``none``, the
default; ``openai``: any OpenAI-compatible HTTP endpoint; ``hf``: a local HF causal LM).

The API key is never a config value: ``api_key_env`` names the environment variable that holds it, read
when the judge calls the endpoint and kept in memory only (never in results, records, caches or logs).
:func:`judge_problems` checks a config before anything loads (``harness.config.validation``: exit 2, each problem
with its key). The judge never changes what a cell generates or measures, so ``judge`` is not part of
the cell's identity (``harness.config.identity``): the same cell can be graded by another judge without
regenerating it.
"""
from __future__ import annotations

import dataclasses
import math
import os
import re
from dataclasses import dataclass, field
from typing import Any, Mapping, Optional
from urllib.parse import urlparse

from harness.errors import ConfigError

GROUP = "judge"
BACKENDS = ("none", "openai", "hf")
MODES = ("single", "pairwise", "both")
ENV_NAME = re.compile(r"^[A-Za-z_][A-Za-z0-9_]*$")


def _help(default: Any, text: str) -> Any:
    return field(default=default, metadata={"help": text})


@dataclass
class JudgeConfig:
    """Who grades MT-Bench answers, and how (``judge.<field>`` on the command line)."""

    name: str = _help("none", "the preset: none | openai | hf (a label)")
    backend: str = _help("none", "none (no judging) | openai (an OpenAI-compatible /chat/completions endpoint) "
                                 "| hf (a local HF causal LM)")
    model: Optional[str] = _help(None, "openai: the endpoint's model name (the paper's judge: gpt-4); "
                                       "hf: hub id, local directory or tiny/<name>")
    base_url: Optional[str] = _help(None, "openai: the API base URL, e.g. https://api.openai.com/v1 "
                                          "(/chat/completions is appended)")
    api_key_env: Optional[str] = _help(None, "openai: NAME of the environment variable holding the API key "
                                             "(never the key itself); null = send no key (a local server)")
    mode: str = _help("single", "single (1-10 rating, metric mt_bench_score) | pairwise (against `reference`, "
                                "metric mt_bench_win_rate) | both")
    reference: Optional[str] = _help(None, "pairwise: the method whose answers are the baseline (e.g. ar_greedy); "
                                           "its cell has the same settings otherwise")
    temperature: float = _help(0.0, "the judge's sampling temperature (FastChat: 0)")
    max_tokens: int = _help(2048, "the judge's answer length limit in tokens (FastChat: 2048)")
    timeout_s: float = _help(120.0, "openai: seconds to wait for one response")
    max_retries: int = _help(6, "openai: retries after a 429, a 5xx, a timeout or a dropped connection")
    backoff_s: float = _help(1.0, "openai: first retry delay; doubled each retry (jittered), or the server's "
                                  "Retry-After")
    backoff_max_s: float = _help(60.0, "openai: longest retry delay")
    requests_per_minute: Optional[float] = _help(None, "openai: at most this many requests per minute "
                                                       "(null = no limit)")
    parallel: int = _help(1, "openai: concurrent requests (FastChat's --parallel); hf judges one at a time")
    cache_dir: Optional[str] = _help(None, "judgment cache; null = <results_dir>/judge_cache")
    use_cache: bool = _help(True, "false = ask the judge again (the answers are still written to the cache)")
    reference_answers: str = _help("mt_bench/reference_answer_gpt-4.jsonl",
                                   "reference answers for math, reasoning and coding (FastChat format; relative "
                                   "to tasks/ unless absolute)")
    device: str = _help("auto", "hf: auto | cpu | cuda | cuda:N | mps")
    dtype: str = _help("auto", "hf: auto | float32 | float16 | bfloat16")

    @classmethod
    def from_config(cls, cfg: Mapping[str, Any] | None) -> "JudgeConfig":
        """From a ``judge`` config (None = no judge); an unknown key fails with the valid keys."""
        cfg = dict(cfg or {})
        valid = [f.name for f in dataclasses.fields(cls)]
        unknown = sorted(set(cfg) - set(valid))
        if unknown:
            raise ConfigError(f"unknown judge key(s) {unknown}. Valid keys: {', '.join(valid)}")
        return cls(**cfg)

    @property
    def enabled(self) -> bool:
        return self.backend != "none"

    @property
    def modes(self) -> tuple[str, ...]:
        return ("single", "pairwise") if self.mode == "both" else (self.mode,)

    def identity(self) -> dict:
        """What makes two judges the same (the cache key's judge part): backend, model, endpoint, sampling."""
        out = {"backend": self.backend, "model": self.model, "temperature": float(self.temperature),
               "max_tokens": int(self.max_tokens)}
        if self.backend == "openai":
            out["base_url"] = (self.base_url or "").rstrip("/")
        if self.backend == "hf":
            out["dtype"] = self.dtype
        return out


PRESETS = {
    "none": JudgeConfig(),
    "openai": JudgeConfig(name="openai", backend="openai", model="gpt-4", base_url="https://api.openai.com/v1",
                          api_key_env="OPENAI_API_KEY"),
    "hf": JudgeConfig(name="hf", backend="hf"),
}


def register_judge_configs(cs) -> None:
    """Store the ``judge`` presets in Hydra's ConfigStore (typed: Hydra checks keys and types)."""
    for name, preset in PRESETS.items():
        cs.store(group=GROUP, name=name, node=preset)


MAX_JUDGE_SECONDS = 3600.0  # one request's deadline, one retry delay


def _in(value, low: float, high: float, integer: bool = False, low_open: bool = False) -> bool:
    number = isinstance(value, int) if integer else isinstance(value, (int, float))
    return (number and not isinstance(value, bool) and math.isfinite(value) and value <= high
            and (value > low if low_open else value >= low))


def _number_problems(c: JudgeConfig) -> list[tuple[str, str]]:
    """Every judge limit in its range (finite, bounded), checked before anything loads."""
    secs = MAX_JUDGE_SECONDS
    checks = [("temperature", _in(c.temperature, 0, 2), "a number >= 0 and <= 2"),
              ("max_tokens", _in(c.max_tokens, 1, 1 << 20, True), f"an integer >= 1 and <= {1 << 20}"),
              ("timeout_s", _in(c.timeout_s, 0, secs, low_open=True), f"a number > 0 and <= {secs}"),
              ("max_retries", _in(c.max_retries, 0, 100, True), "an integer >= 0 and <= 100"),
              ("backoff_s", _in(c.backoff_s, 0, secs), f"a number >= 0 and <= {secs}"),
              ("backoff_max_s", _in(c.backoff_max_s, 0, secs) and _in(c.backoff_s, 0, secs)
               and c.backoff_max_s >= c.backoff_s, f"a number >= judge.backoff_s and <= {secs}"),
              ("requests_per_minute",
               c.requests_per_minute is None or _in(c.requests_per_minute, 0, 1e6, low_open=True),
               "a number > 0 and <= 1000000, or null (no limit)"),
              ("parallel", _in(c.parallel, 1, 256, True), "an integer >= 1 and <= 256")]
    return [(f"judge.{k}", f"must be {valid}, got {getattr(c, k)!r}") for k, ok, valid in checks if not ok]


def _openai_problems(c: JudgeConfig, environ: Mapping[str, str]) -> list[tuple[str, str]]:
    out = []
    url = urlparse(c.base_url or "")
    if url.username or url.password or url.query:  # never echo it: it holds credentials
        out.append(("judge.base_url", "must not hold credentials (user:password@ or a ?query): results and caches "
                                      "name the endpoint; put the key in the variable named by judge.api_key_env"))
    elif url.scheme not in ("http", "https") or not url.hostname:
        out.append(("judge.base_url", f"must be an http(s) URL such as https://api.openai.com/v1 or "
                                      f"http://127.0.0.1:8000/v1, got {c.base_url!r}"))
    if c.api_key_env is not None:
        if not ENV_NAME.match(str(c.api_key_env)):  # never echo it: it may be the key itself
            out.append(("judge.api_key_env", "must be the NAME of an environment variable holding the API key "
                                             "(e.g. OPENAI_API_KEY), not the key itself"))
        elif not environ.get(c.api_key_env):
            out.append(("judge.api_key_env", f"environment variable {c.api_key_env} is not set or empty (export it "
                                             "with the judge's API key, or set judge.api_key_env=null for an "
                                             "endpoint without one)"))
    return out


def _hf_problems(c: JudgeConfig) -> list[tuple[str, str]]:
    from harness.models import DEVICE_PATTERN, DTYPE_CHOICES, check_model_ref

    out = []
    try:
        check_model_ref("judge.model", c.model)
    except ConfigError as e:
        out.append(("judge.model", str(e)))
    if c.dtype not in DTYPE_CHOICES:
        out.append(("judge.dtype", f"unknown dtype {c.dtype!r}. Valid: {', '.join(DTYPE_CHOICES)}"))
    if not isinstance(c.device, str) or not DEVICE_PATTERN.match(c.device):
        out.append(("judge.device", f"unknown device {c.device!r}. Valid: auto, cpu, cuda, cuda:N, mps"))
    return out


def judge_problems(cfg: Mapping[str, Any] | None, task=None, single: bool = True,
                   environ: Mapping[str, str] | None = None) -> list[tuple[str, str]]:
    """Every problem of a ``judge`` config as ``(key, message)``; nothing loads. ``task``: the cell's task
    (a judge on a task that is not judged is a problem in a single run; a sweep over datasets skips it)."""
    try:
        c = JudgeConfig.from_config(cfg)
    except (ConfigError, TypeError) as e:
        return [("judge", str(e))]
    if c.backend not in BACKENDS:
        return [("judge.backend", f"unknown judge backend {c.backend!r}. Valid: {', '.join(BACKENDS)}")]
    if not c.enabled:
        return []
    out = _number_problems(c)
    if c.mode not in MODES:
        out.append(("judge.mode", f"unknown mode {c.mode!r}. Valid: {', '.join(MODES)}"))
    elif c.mode != "single" and not c.reference:
        out.append(("judge.reference",
                    f"judge.mode={c.mode} needs the reference method (e.g. judge.reference=ar_greedy)"))
    if c.backend == "openai" and not c.model:
        out.append(("judge.model", "required: the endpoint's model name (e.g. gpt-4o)"))
    out += _openai_problems(c, os.environ if environ is None else environ) if c.backend == "openai" else _hf_problems(c)
    from harness.judge.prompts import reference_path

    if not reference_path(c.reference_answers).is_file():
        out.append(("judge.reference_answers", f"file not found: {reference_path(c.reference_answers)}"))
    if task is not None and single and not getattr(task, "judged", False):
        out.append(("judge", f"dataset '{task.name}' is not graded by a judge (judged: mt_bench); use judge=none"))
    return out
