"""Task interface. A task is a small definition — data source, prompt template, max new
tokens, stop sequences, metric — selected by the ``dataset`` config group
(``conf/dataset/<name>.yaml``: ``task:`` names a registered :class:`Task` class, the rest
are its fields). Shipped data lives in ``tasks/<name>/`` with its provenance and licence.
"""
from __future__ import annotations

import dataclasses
import random
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, ClassVar

from harness.errors import ConfigError
from harness.registry import Registry

PROJECT_ROOT = Path(__file__).resolve().parents[2]
TASKS_DIR = PROJECT_ROOT / "tasks"


@dataclass
class Example:
    """One prompt. ``meta`` holds small scalars that go into every record (``meta.<key>``);
    ``messages`` (chat roles and contents) and ``response_prefix`` are the prompt for
    tokenizers with a chat template."""

    id: str
    prompt: str
    reference: Any = None
    meta: dict = field(default_factory=dict)
    messages: list[dict] | None = None
    response_prefix: str = ""


PROMPT_FORMATS = ("auto", "plain", "chat")


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
    name: str = ""
    num_prompts: int | None = None
    sample_seed: int | None = None
    max_new_tokens: int = 64
    stop: list[str] = field(default_factory=list)
    prompt_format: str = "auto"

    def __post_init__(self):
        if self.prompt_format not in PROMPT_FORMATS:
            raise ConfigError(f"unknown prompt_format '{self.prompt_format}'. Valid: {', '.join(PROMPT_FORMATS)}")

    def load(self) -> list[Example]:
        raise NotImplementedError

    def examples(self) -> list[Example]:
        items = self.load()
        if not self.num_prompts or self.num_prompts >= len(items):
            return items
        if self.sample_seed is None:
            return items[: self.num_prompts]
        keep = sorted(random.Random(self.sample_seed).sample(range(len(items)), self.num_prompts))
        return [items[i] for i in keep]

    def uses_chat_template(self, example: Example, tokenizer) -> bool:
        if self.prompt_format == "plain" or not example.messages:
            return False
        has_template = bool(getattr(tokenizer, "chat_template", None))
        if self.prompt_format == "chat" and not has_template:
            raise ConfigError(f"task '{self.name}': prompt_format 'chat' but the tokenizer has no chat template. "
                              f"Valid: {', '.join(PROMPT_FORMATS)}")
        return has_template

    def prompt_text(self, example: Example, tokenizer) -> str:
        """The text the model continues: the plain prompt or the chat-template rendering."""
        if not self.uses_chat_template(example, tokenizer):
            return example.prompt
        rendered = tokenizer.apply_chat_template(example.messages, tokenize=False, add_generation_prompt=True)
        return rendered + example.response_prefix

    def prompt_ids(self, example: Example, tokenizer) -> list[int]:
        """Prompt token ids. A chat template writes its own special tokens (BOS), so none are added then."""
        chat = self.uses_chat_template(example, tokenizer)
        return tokenizer(self.prompt_text(example, tokenizer), add_special_tokens=not chat)["input_ids"]

    def truncate(self, text: str) -> str:
        """Cut the output at the first stop sequence (applied after decoding, before scoring)."""
        cut = len(text)
        for s in self.stop:
            i = text.find(s)
            if i >= 0:
                cut = min(cut, i)
        return text[:cut]

    def score(self, example: Example, output: str) -> dict[str, float]:
        """Task metrics for one output (after :meth:`truncate`). Empty when the task has none."""
        return {}

    def resolve(self, path: str) -> Path:
        """Paths in task configs are relative to the project's ``tasks/`` folder unless absolute."""
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
        raise ConfigError(f"unknown key(s) {unknown} for task '{kind}'. Valid keys: {', '.join(sorted(valid))}")
    return cls(**cfg)
