"""The flow predictor's validation metrics as torchmetrics, reduced over DDP ranks.

Each rank scores its share of the validation queries (``rank_share``); the metrics' states (sums and counts)
are summed over ranks on ``compute()``, so the logged value is the one a single process scoring every query
gets (up to float summation order), whatever the share sizes. Shapes: ``[B]`` per query.
"""

from __future__ import annotations

import numpy as np
import torch
from torchmetrics import MeanAbsoluteError, MeanMetric
from torchmetrics.classification import BinaryAccuracy


def rank_share(n: int, rank: int, world_size: int) -> np.ndarray:
    """Indices of the ``n`` items rank ``rank`` of ``world_size`` takes (every world_size-th, from ``rank``)."""
    return np.arange(int(rank), int(n), max(1, int(world_size)))


def validation_budgets(bank, rows, n_obs, seed: int, obs_every: int = 10) -> np.ndarray:
    """A budget (batches) per validation query, uniform between the prefix end (exclusive) and the curve's end."""
    rng = np.random.default_rng([int(seed), 4])
    s0 = np.asarray(n_obs) * obs_every
    return rng.integers(s0 + 1, bank.lengths[np.asarray(rows)] + 1)


class RemainingBatchMetrics(torch.nn.Module):
    """Capped remaining-batch MAE, budget accuracy (predicted crossing within the budget ↔ true crossing within
    it, as in the prediction benchmark) and coverage of the prediction's band [lo, hi] (ends included)."""

    def __init__(self):
        super().__init__()
        self.mae = MeanAbsoluteError().set_dtype(torch.float64)
        self.budget_acc = BinaryAccuracy()
        self.coverage = MeanMetric().set_dtype(torch.float64)

    def update(self, pred, lo, hi, truth, s0, budget, first) -> None:
        """pred [B] predicted remaining batches, [lo, hi] [B] its band; truth [B] capped true remaining; s0 [B] prefix
        end; budget [B]; first [B] true first crossing (batches from the start)."""
        if len(truth) == 0:
            return
        dev = self.mae.device
        pred, lo, hi, truth, s0, budget, first = (
            torch.as_tensor(np.asarray(a, np.float64), device=dev) for a in (pred, lo, hi, truth, s0, budget, first)
        )
        self.mae.update(pred, truth)
        self.budget_acc.update((s0 + pred <= budget).long(), (first <= budget).long())
        self.coverage.update(((lo <= truth) & (truth <= hi)).double())

    def compute(self) -> dict[str, float]:
        """Values over every rank's queries (a collective under DDP: every rank calls it)."""
        return {
            "mae": float(self.mae.compute()),
            "budget_acc": float(self.budget_acc.compute()),
            "coverage": float(self.coverage.compute()),
        }

    def reset(self) -> None:
        for m in (self.mae, self.budget_acc, self.coverage):
            m.reset()
