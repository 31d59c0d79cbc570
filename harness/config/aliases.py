"""Method aliases that follow the decoding (one table, torch-free: the cell identity reads it without loading the
decoders): ``ar`` is ``ar_greedy`` under a greedy decoding and ``ar_sampling`` under sampling; ``beam`` is
``beam_search`` | ``beam_sampling``. An alias cell *is* the cell of the method it resolves to
(:func:`harness.config.identity.cell_id`)."""
from __future__ import annotations

from typing import Any, Mapping

#: alias -> {decoding kind: decoder}
ALIASES: dict[str, dict[str, str]] = {"ar": {"greedy": "ar_greedy", "sampling": "ar_sampling"},
                                      "beam": {"greedy": "beam_search", "sampling": "beam_sampling"}}
SAMPLING_TEMPERATURE = 1.0  # a cell without a decoding samples (harness.decoding.SAMPLING)


def decoding_kind(decoding: Mapping[str, Any] | None) -> str:
    """``greedy`` (temperature 0) or ``sampling``, as :func:`harness.methods.resolve_method` decides it."""
    temperature = (decoding or {}).get("temperature", SAMPLING_TEMPERATURE)
    return "greedy" if temperature == 0 else "sampling"
