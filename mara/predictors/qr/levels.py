"""Quantile regression pieces for the decision head, written out as pure functions.

Shapes: ``B`` examples, ``Q`` quantile levels. Values are in whatever unit the caller uses (the decision head
uses log(1 + remaining batches)).
"""

from __future__ import annotations

import numpy as np
import torch

DEFAULT_LEVELS = (0.01, 0.02, 0.05, 0.1, 0.2, 0.3, 0.5, 0.7, 0.9, 0.95)


def check_levels(levels) -> tuple[float, ...]:
    """Strictly increasing levels in (0, 1) -> tuple; ValueError otherwise."""
    lv = tuple(float(x) for x in levels)
    if not lv or any(not 0.0 < x < 1.0 for x in lv) or any(b <= a for a, b in zip(lv, lv[1:])):
        raise ValueError(f"quantile levels must be strictly increasing in (0, 1), got {list(levels)}")
    return lv


def pinball_loss(pred: torch.Tensor, target: torch.Tensor, levels) -> torch.Tensor:
    """Mean over examples and levels of the pinball (check) loss ρ_τ(y − q) = max(τ (y − q), (τ − 1)(y − q)).

    pred [B, Q], target [B], levels [Q] -> scalar. Its minimiser over q for each level is the τ-quantile of y."""
    tau = torch.as_tensor(levels, dtype=pred.dtype, device=pred.device)
    d = target[:, None] - pred
    return torch.maximum(tau * d, (tau - 1.0) * d).mean()


def monotone_quantiles(raw: torch.Tensor) -> torch.Tensor:
    """Non-crossing quantiles from free outputs: q_0 = raw_0, q_k = q_{k−1} + softplus(raw_k). [B, Q] -> [B, Q]."""
    return torch.cat([raw[:, :1], raw[:, :1] + torch.cumsum(torch.nn.functional.softplus(raw[:, 1:]), dim=1)], dim=1)


def level_index(levels, wanted) -> list[int]:
    """Index of each wanted level among ``levels`` (to 1e-9); ValueError naming the missing ones."""
    lv = np.asarray(levels, np.float64)
    out, missing = [], []
    for w in wanted:
        hit = np.flatnonzero(np.abs(lv - float(w)) < 1e-9)
        (out.append(int(hit[0])) if len(hit) else missing.append(float(w)))
    if missing:
        raise ValueError(f"band levels {missing} are not among the head's trained levels {lv.tolist()}")
    return out
