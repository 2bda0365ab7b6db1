"""Calibrated spread of remaining-batch predictions: split-conformal offsets on a quantile band.

All in log(1 + remaining batches) space, where errors of a 10-batch and a 300-batch task are comparable.
Shapes: ``[B]`` per task unless noted.
"""

from __future__ import annotations

import numpy as np

DEFAULT_QUANTILES = (0.1, 0.5, 0.9)


def conformal_score(scores, coverage: float) -> float:
    """The split-conformal threshold of ``scores`` [n]: the ⌈(n+1)·coverage⌉-th smallest (the largest if that rank
    exceeds n); 0.0 for no scores."""
    scores = np.sort(np.asarray(scores, np.float64))
    n = len(scores)
    if n == 0:
        return 0.0
    return float(scores[min(int(np.ceil((n + 1) * coverage)), n) - 1])


def conformal_offset(lo, hi, truth, coverage: float = 0.8) -> float:
    """Split-conformal (CQR) offset e: the band [lo·e⁻, hi·e⁺] (in log1p) covers ``truth`` on a ⌈(n+1)·coverage⌉/n
    share of the calibration set. Scores max(log1p lo − log1p y, log1p y − log1p hi); e may be negative (shrink)."""
    lo, hi, y = (np.log1p(np.maximum(np.asarray(a, np.float64), 0.0)) for a in (lo, hi, truth))
    return conformal_score(np.maximum(lo - y, y - hi), coverage)


def apply_offset(lo, med, hi, offset, cap) -> tuple[np.ndarray, np.ndarray]:
    """Widen (or shrink) a band by ``offset`` in log1p space, keep lo ≤ med ≤ hi, clip to [0, cap]."""
    lo = np.expm1(np.log1p(np.maximum(lo, 0.0)) - offset)
    hi = np.expm1(np.log1p(np.maximum(hi, 0.0)) + offset)
    cap = np.asarray(cap, np.float64)
    return np.clip(np.minimum(lo, med), 0.0, cap), np.clip(np.maximum(hi, med), 0.0, cap)


def band_metrics(q: np.ndarray, truth: np.ndarray) -> dict:
    """Coverage of [q_lo, q_hi] (ends included) and the mean band width in batches. q [B, Q] ordered."""
    truth = np.asarray(truth, np.float64)
    inside = (q[:, 0] <= truth) & (truth <= q[:, -1])
    return {
        "coverage": float(inside.mean()) if len(truth) else float("nan"),
        "band_width": float((q[:, -1] - q[:, 0]).mean()) if len(truth) else float("nan"),
    }
