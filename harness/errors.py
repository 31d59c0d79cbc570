"""Errors the harness raises for bad input: each says what was wrong and what is valid."""


class HarnessError(Exception):
    """Base class: a user-facing error with a message that explains the fix."""


class ConfigError(HarnessError, ValueError):
    """An unknown method, option or key, or a value out of range."""


class TokenizerMismatchError(HarnessError):
    """Draft and target tokenizers differ, so token ids cannot be shared between them."""
