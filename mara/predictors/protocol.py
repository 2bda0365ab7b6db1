"""The predictor interface shared by every allocator (predictors are built in :mod:`mara.predictors.factory`).

Shapes: ``B`` tasks, ``H`` padded history. S, L [B, H] float64 (processed samples, cumulative-average
loss), lengths [B] int, eps [B], cap_remaining [B] int batches, batch_size [B], lr [B];
optional ``family`` [B] str selects per-family inference settings. Returns [B] float remaining
batches in [0, cap_remaining]; fewer than 4 observations → cap_remaining.

Uncertainty: a predictor may also offer ``predict_quantiles`` (same arguments) -> [B, Q] ordered remaining
batches at its ``quantiles`` (default q10, q50, q90; the middle column equals ``predict_remaining``). FM: flow-
sample quantiles with a conformal offset calibrated on validation curves; WLS: a heuristic slope-error band.
``predict_band`` (mara/predictors/estimates.py) gives (lo, median, hi) for any predictor (a degenerate band
lo = median = hi for predictors without ``predict_quantiles``).
"""

from __future__ import annotations

from typing import Protocol, runtime_checkable

import numpy as np

WARMUP_OBS = 4  # observations before a predictor is asked for estimates, unless it answers cold tasks (``first_obs``)


@runtime_checkable
class RemainingPredictor(Protocol):
    name: str

    def predict_remaining(self, S, L, lengths, eps, cap_remaining, batch_size, lr, family=None) -> np.ndarray: ...


def check_first_obs(first_obs) -> int:
    """A predictor's ``first_obs``: the observation count (1 to WARMUP_OBS) from which it is asked for estimates."""
    if isinstance(first_obs, bool) or not isinstance(first_obs, (int, np.integer)) or not 1 <= first_obs <= WARMUP_OBS:
        raise ValueError(
            f"first_obs must be an integer in [1, {WARMUP_OBS}] (the observation from which estimates are "
            f"asked for), got {first_obs!r}"
        )
    return int(first_obs)
