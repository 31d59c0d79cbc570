"""Errors the harness raises for bad input: each says what was wrong and what is valid."""


class HarnessError(Exception):
    """Base class: a user-facing error with a message that explains the fix."""


class ConfigError(HarnessError, ValueError):
    """An unknown method, option or key, or a value out of range. ``key``: the dotted config key it is about
    (``runner.threads``), when the raiser knows it — validation reports it as is, never guessing it from the
    message."""

    def __init__(self, message: str = "", key: str | None = None):
        super().__init__(message)
        self.key = key


class TokenizerMismatchError(HarnessError):
    """Draft and target tokenizers differ, so token ids cannot be shared between them."""


class NotApplicable(ConfigError):
    """A method that cannot decode the requested way (e.g. a greedy-only method under decoding=sampling).

    In a sweep such a cell is reported as not applicable and skipped, not failed."""
