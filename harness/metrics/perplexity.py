"""Output perplexity under the TARGET model (mtad Eq. 1): teacher-forced on prompt + output,
averaged over the output tokens only."""
from __future__ import annotations

import math

import torch


@torch.inference_mode()
def output_perplexity(model, prompt_ids: list[int], output_ids: list[int]) -> float:
    """exp(−mean log p(x_t | prompt, x_<t)) over the output tokens; NaN for an empty output."""
    if not output_ids:
        return math.nan
    ids = torch.tensor([list(prompt_ids) + list(output_ids)], device=model.device)
    logits = model(input_ids=ids).logits[0, len(prompt_ids) - 1: -1].float()
    nll = torch.nn.functional.cross_entropy(logits, ids[0, len(prompt_ids):], reduction="mean")
    return float(torch.exp(nll))
