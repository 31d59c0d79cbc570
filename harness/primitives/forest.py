"""A beam forest in fixed slots, laid out on the device (DSBD's draft forest, dsbd §3.3 and Fig. 3).

A forest of L layers of W beams is fed in one batch row per tree root (an input beam). Instead of packing each
row with the nodes of its own tree (a layout read from the device: which beam hangs off which root), every row
holds every layer's W slots: slot (d, j) is beam j of layer d, at column d·W + j of the tree part of every row.
A slot attends to the row's prefix, the stem and the slots of its own ancestors; in the row of its own root it is
the real beam, in the other rows an inert copy no real slot attends to (its ancestors are inert there too). So the
masks and positions depend on the forest's parents only, are built by tensor operations from them, and no layout
is read on the host (issue 28 item 2); a beam's cache position is d·W + j after the row's prefix, whatever it
descends from. The cost: every row feeds W slots per layer where a packed row feeds the most any root has.
"""
from __future__ import annotations

import torch


def ancestors(previous: torch.Tensor | None, parent: torch.Tensor) -> torch.Tensor:
    """(W, d + 1): every beam's slot index in layers 0..d (itself last), from the previous layer's (W', d)
    ancestors and each beam's ``parent`` in that layer (``previous`` None: layer 0, whose parents are roots)."""
    own = torch.arange(parent.numel(), device=parent.device)[:, None]
    return own if previous is None else torch.cat([previous[parent], own], dim=1)


def slot_visibility(ancestors_of: torch.Tensor, width: int, layers: int) -> torch.Tensor:
    """(W, layers·W) bool: the slots each beam of a layer attends to (its ancestors' and its own), of ``layers``."""
    seen = torch.nn.functional.one_hot(ancestors_of, width).reshape(ancestors_of.size(0), -1).bool()
    return torch.nn.functional.pad(seen, (0, layers * width - seen.size(1)))


def forest_mask(prefix: int, stem: int, visible: torch.Tensor, dtype: torch.dtype) -> torch.Tensor:
    """Additive 4-D mask (1, 1, stem + k, prefix + stem + t) for feeding ``stem`` chained tokens then k slots, the
    last k of the t tree slots (``visible`` (k, t): which slots each fed slot attends to). Everything attends to the
    ``prefix`` cached positions; the stem is causal; the slots see the whole stem and the ``visible`` slots."""
    k, t = visible.shape
    dev = visible.device
    allowed = torch.zeros((stem + k, stem + t), dtype=torch.bool, device=dev)
    if stem:
        allowed[:stem, :stem] = torch.ones((stem, stem), dtype=torch.bool, device=dev).tril()
        allowed[stem:, :stem] = True
    allowed[stem:, stem:] = visible
    mask = torch.zeros((stem + k, prefix + stem + t), dtype=dtype, device=dev)
    mask[:, prefix:].masked_fill_(~allowed, torch.finfo(dtype).min)
    return mask[None, None]


def forest_positions(prefix: int, stem: int, depth: torch.Tensor) -> torch.Tensor:
    """(1, stem + k) position ids: the stem's in order after the prefix, then each fed slot's ``depth`` (0 for the
    first layer) after the stem: the position its beam's token has in a plain sequence."""
    stem_pos = torch.arange(prefix, prefix + stem, device=depth.device)
    return torch.cat([stem_pos, depth + (prefix + stem)])[None]
