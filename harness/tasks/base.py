"""Task interface. A task is a small definition — data source, prompt template, max new
tokens, stop sequences, metric — selected by the ``dataset`` config group
(``conf/dataset/<name>.yaml``: ``task:`` names a registered :class:`Task` class, the rest
are its fields). Shipped data lives in ``tasks/<name>/`` with its provenance and licence.
"""
from __future__ import annotations

import dataclasses
import math
import random
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, ClassVar

from harness.errors import ConfigError
from harness.registry import Registry

from harness.resources import data_dir

TASKS_DIR = data_dir()


@dataclass
class Example:
    """One prompt. ``meta`` holds small scalars that go into every record (``meta.<key>``);
    ``messages`` (chat roles and contents) and ``response_prefix`` are the prompt for
    tokenizers with a chat template. ``history``: for a later turn of a conversation, the ids of the
    earlier turns whose answers (the cell's own) its prompt holds; the runner builds that prompt with
    :meth:`Task.with_history` once those answers exist."""

    id: str
    prompt: str
    reference: Any = None
    meta: dict = field(default_factory=dict)
    messages: list[dict] | None = None
    response_prefix: str = ""
    history: list[str] = field(default_factory=list)


PROMPT_FORMATS = ("auto", "plain", "chat")


def uses_chat_template(tokenizer, messages, prompt_format: str = "auto", who: str = "prompt") -> bool:
    """Whether a prompt goes through the tokenizer's chat template: ``plain`` never, ``auto`` when there
    are messages and the tokenizer has a template, ``chat`` always (an error without a template)."""
    if prompt_format not in PROMPT_FORMATS:
        raise ConfigError(f"unknown prompt_format '{prompt_format}'. Valid: {', '.join(PROMPT_FORMATS)}")
    if prompt_format == "plain" or not messages:
        return False
    has_template = bool(getattr(tokenizer, "chat_template", None))
    if prompt_format == "chat" and not has_template:
        raise ConfigError(f"{who}: prompt_format 'chat' but the tokenizer has no chat template. "
                          f"Valid: {', '.join(PROMPT_FORMATS)}")
    return has_template


def render_prompt(tokenizer, text: str, messages=None, response_prefix: str = "",
                  prompt_format: str = "auto", who: str = "prompt") -> tuple[str, bool]:
    """The text the model continues, and whether it is a chat-template rendering (which writes its own
    special tokens, so none are added when encoding it)."""
    if not uses_chat_template(tokenizer, messages, prompt_format, who):
        return text, False
    rendered = tokenizer.apply_chat_template(list(messages), tokenize=False, add_generation_prompt=True)
    return rendered + response_prefix, True


def encode_prompt(tokenizer, prompt, *, prompt_format: str = "auto", response_prefix: str = "") -> list[int]:
    """Prompt token ids exactly as the CLI's tasks make them (Python API).

    ``prompt`` is a string or a list of chat messages (``{"role": ..., "content": ...}``). Messages go
    through the tokenizer's chat template when it has one (``prompt_format="auto"``; ``"chat"`` requires
    it, ``"plain"`` never uses it); a string is a plain prompt, or one user message under ``"chat"``.
    Without a template, messages are joined as plain text.
    """
    if isinstance(prompt, str):
        messages = [{"role": "user", "content": prompt}] if prompt_format == "chat" else None
        text = prompt
    else:
        messages = [dict(m) for m in prompt]
        text = "\n".join(str(m["content"]) for m in messages)
    rendered, chat = render_prompt(tokenizer, text, messages, response_prefix, prompt_format)
    return tokenizer(rendered, add_special_tokens=not chat)["input_ids"]


def check_limit(value, key: str, low: float, high: float, *, integer: bool = False, low_open: bool = False) -> None:
    """A :class:`ConfigError` naming ``key`` and the range unless ``value`` is a finite number (an integer where
    ``integer``) with ``low <= value <= high`` (``low < value`` where ``low_open``): every task limit is checked
    this way when the task is made, before anything loads."""
    number = isinstance(value, int) if integer else isinstance(value, (int, float))
    ok = number and not isinstance(value, bool) and math.isfinite(value) and value <= high and \
        (value > low if low_open else value >= low)
    if not ok:
        raise ConfigError(f"{key} must be {'an integer' if integer else 'a number'} {'>' if low_open else '>='} {low} "
                          f"and <= {high}, got {value!r}", key=key)


def _int_at_least(value, minimum: int) -> bool:
    return isinstance(value, int) and not isinstance(value, bool) and value >= minimum


@dataclass
class Task:
    """Base task. Subclasses add fields (their config keys) and override ``load``/``score``.

    ``num_prompts`` keeps the first N examples, or a seeded random N when ``sample_seed`` is set
    (for data grouped by topic or database). ``prompt_format`` chooses between the plain prompt
    (``Example.prompt``) and the tokenizer's chat template applied to ``Example.messages``
    (followed by ``Example.response_prefix``): ``auto`` uses the chat template when the tokenizer
    has one and the example has messages.
    """

    kind: ClassVar[str] = ""
    #: the metric (a key of :meth:`score`) the report uses as the task's quality axis; None = the task has
    #: no reference metric and quality is the output's perplexity under the target (lower is better)
    primary_metric: ClassVar[str | None] = None
    higher_is_better: ClassVar[bool] = True  # the primary metric's direction
    #: modules of optional extras the task needs to read its data or score (:mod:`harness.config.extras`): validation
    #: checks them before any model loads
    requires: ClassVar[tuple[str, ...]] = ()
    name: str = ""
    num_prompts: int | None = None
    sample_seed: int | None = None
    max_new_tokens: int = 64
    stop: list[str] = field(default_factory=list)
    prompt_format: str = "auto"

    def __post_init__(self):
        if self.prompt_format not in PROMPT_FORMATS:
            raise ConfigError(f"unknown prompt_format '{self.prompt_format}'. Valid: {', '.join(PROMPT_FORMATS)}",
                              key="dataset.prompt_format")
        if self.num_prompts is not None and not _int_at_least(self.num_prompts, 1):
            raise ConfigError(f"dataset.num_prompts must be an integer >= 1, or null (all prompts of the set), "
                              f"got {self.num_prompts!r}", key="dataset.num_prompts")
        if not _int_at_least(self.max_new_tokens, 1):
            raise ConfigError(f"dataset.max_new_tokens must be an integer >= 1, got {self.max_new_tokens!r}",
                              key="dataset.max_new_tokens")
        if self.sample_seed is not None and not (_int_at_least(self.sample_seed, 0) and self.sample_seed < 2**32):
            raise ConfigError(f"dataset.sample_seed must be an integer >= 0 and <= {2**32 - 1}, or null (the first "
                              f"num_prompts), got {self.sample_seed!r}", key="dataset.sample_seed")
        if not isinstance(self.stop, (list, tuple)) or not all(isinstance(x, str) and x for x in self.stop):
            raise ConfigError(f"dataset.stop must be a list of non-empty strings (an empty one would cut every "
                              f"output to nothing), got {self.stop!r}", key="dataset.stop")

    def required_modules(self) -> tuple[str, ...]:
        """The optional modules this task (with its config) needs: :attr:`requires` unless a task's metric is chosen
        by its config."""
        return tuple(self.requires)

    def load(self) -> list[Example]:
        raise NotImplementedError

    def _data_file(self) -> str:
        path = getattr(self, "path", None)
        return (f"{self.resolve(path)} (dataset.path)" if isinstance(path, str) and path
                else f"the data of task '{self.kind}' (dataset.path)")

    def examples(self) -> list[Example]:
        """The prompts: all of the set when ``num_prompts`` is null (or exceeds the set), else the first
        ``num_prompts`` (or a seeded sample). A data file that is not UTF-8 or not valid JSON is a
        :class:`ConfigError` naming the file."""
        try:
            items = self.load()
        except UnicodeDecodeError as e:
            raise ConfigError(f"dataset '{self.name}': {self._data_file()} is not valid UTF-8 text "
                              f"(byte {e.object[e.start:e.start + 1]!r} at offset {e.start}); re-encode it as UTF-8",
                              key="dataset.path") from e
        except ValueError as e:
            if type(e).__name__ != "JSONDecodeError":
                raise
            raise ConfigError(f"dataset '{self.name}': {self._data_file()} is not valid JSON/JSONL: {e}",
                              key="dataset.path") from e
        except FileNotFoundError as e:
            raise ConfigError(f"dataset '{self.name}': data file not found: {e.filename or self._data_file()} "
                              "(dataset.path is relative to the shipped task data (tasks/ in a checkout, "
                              "harness/data in an install) unless absolute)",
                              key="dataset.path") from e
        except (KeyError, TypeError, AttributeError, IndexError) as e:
            raise ConfigError(f"dataset '{self.name}': {self._data_file()} has a row of the wrong shape for task "
                              f"'{self.kind}' ({type(e).__name__}: {e})", key="dataset.path") from e
        if self.num_prompts is None or self.num_prompts >= len(items):
            return items
        if self.sample_seed is None:
            return items[: self.num_prompts]
        keep = sorted(random.Random(self.sample_seed).sample(range(len(items)), self.num_prompts))
        return [items[i] for i in keep]

    def _render(self, example: Example, tokenizer) -> tuple[str, bool]:
        return render_prompt(tokenizer, example.prompt, example.messages, example.response_prefix,
                             self.prompt_format, who=f"task '{self.name}'")

    def uses_chat_template(self, example: Example, tokenizer) -> bool:
        return uses_chat_template(tokenizer, example.messages, self.prompt_format, who=f"task '{self.name}'")

    def prompt_text(self, example: Example, tokenizer) -> str:
        """The text the model continues: the plain prompt or the chat-template rendering."""
        return self._render(example, tokenizer)[0]

    def prompt_ids(self, example: Example, tokenizer) -> list[int]:
        """Prompt token ids. A chat template writes its own special tokens (BOS), so none are added then."""
        text, chat = self._render(example, tokenizer)
        return tokenizer(text, add_special_tokens=not chat)["input_ids"]

    def truncate(self, text: str) -> str:
        """Cut the output at the first stop sequence (applied after decoding, before scoring)."""
        cut = len(text)
        for s in self.stop:
            i = text.find(s)
            if i >= 0:
                cut = min(cut, i)
        return text[:cut]

    def with_history(self, example: Example, records: list[dict]) -> Example:
        """A later turn's example with the cell's own earlier answers (``records``: the cell's records so far,
        holding the turns named in ``example.history``) in its prompt. Only multi-turn tasks set ``history``."""
        raise NotImplementedError(f"task '{self.kind}' has no multi-turn examples")

    def score(self, example: Example, output: str) -> dict[str, float]:
        """Task metrics for one output (after :meth:`truncate`). Empty when the task has none."""
        return {}

    def resolve(self, path: str) -> Path:
        """Paths in task configs are relative to ``tasks/`` (the shipped task data) unless absolute."""
        p = Path(path)
        return p if p.is_absolute() else TASKS_DIR / p


TASKS: Registry[type[Task]] = Registry("task kind", "kind", "harness.tasks")
register_task = TASKS.register


def task_registry() -> dict[str, type[Task]]:
    """Every registered task class by kind (imports every task module once)."""
    return TASKS.all()


def load_task(cfg: dict) -> Task:
    """Build a task from a ``dataset`` config: ``{task: <kind>, name: ..., <fields>}``."""
    cfg = dict(cfg)
    cls = TASKS.get(cfg.pop("task", None))
    kind = cls.kind
    valid = {f.name for f in dataclasses.fields(cls)}
    unknown = sorted(set(cfg) - valid)
    if unknown:
        raise ConfigError(f"unknown key(s) {unknown} for task '{kind}'. Valid keys: {', '.join(sorted(valid))}",
                          key=f"dataset.{unknown[0]}")
    return cls(**cfg)
