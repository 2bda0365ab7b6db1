"""Recalibrating a quantile band level by level for families its predictor never trained on.

A head trained on some families reads others (the zoo's RL and ViT runs) with quantiles that do not hold: on
Montezuma its 0.9 level is below the true remaining batches for most early prefixes. ``level_shifts`` fits, per
(family, observation-count bin, band level τ), the shift δ in log(1 + batches) that makes the shifted level cover
the truth on a τ share of that family's calibration queries (the τ-quantile of the residuals
log1p(truth) − log1p(q_τ)); ``apply_level_shifts`` moves a band by them and keeps it ordered and within [0, cap].
Calibration queries come from curves run for calibration alone (the bank's ``cal`` split), never the curves the
simulator draws tasks from. Shapes: ``[B]`` per task, ``[B, Q]`` band levels; shifts per family ``[n_bins, Q]``.
"""

from __future__ import annotations

from typing import Mapping

import numpy as np

MIN_QUERIES = 8  # a (family, bin) with fewer calibration queries is not shifted (nan)


def level_shifts(band, truth, levels, family, n_obs, obs_bins) -> dict[str, np.ndarray]:
    """{family: [n_bins, Q] shifts} of ``band`` [B, Q] (remaining batches at ``levels``) against ``truth`` [B]: per
    (family, bin) and level τ, the τ-quantile of log1p(truth) − log1p(band[:, τ]); nan where a bin has fewer than
    ``MIN_QUERIES`` queries."""
    band, truth = np.asarray(band, np.float64), np.asarray(truth, np.float64)
    resid = np.log1p(np.maximum(truth, 0.0))[:, None] - np.log1p(np.maximum(band, 0.0))
    family, bins = np.asarray(family).astype(str), np.digitize(np.asarray(n_obs), obs_bins)
    out = {}
    for f in np.unique(family):
        shifts = np.full((len(obs_bins) + 1, len(levels)), np.nan)
        for b in range(len(obs_bins) + 1):
            m = (family == f) & (bins == b)
            if m.sum() >= MIN_QUERIES:
                shifts[b] = [np.quantile(resid[m, j], tau, method="inverted_cdf") for j, tau in enumerate(levels)]
        out[str(f)] = shifts
    return out


def apply_level_shifts(band, family, n_obs, shifts: Mapping[str, np.ndarray], obs_bins, cap) -> np.ndarray:
    """``band`` [B, Q] moved by each row's (family, bin) shifts (rows of other families, empty bins, NaN estimates
    unchanged), re-sorted across levels and clipped to [0, cap]."""
    out = np.array(band, np.float64)
    if family is None or not shifts:
        return out
    family, bins = np.asarray(family).astype(str), np.digitize(np.asarray(n_obs), obs_bins)
    cap = np.asarray(cap, np.float64)
    for f, s in shifts.items():
        rows = np.flatnonzero((family == f) & np.isfinite(out).all(1))
        d = np.asarray(s, np.float64)[bins[rows]]
        ok = np.isfinite(d).all(1)
        rows, d = rows[ok], d[ok]
        if len(rows):
            moved = np.sort(np.expm1(np.log1p(np.maximum(out[rows], 0.0)) + d), axis=1)
            out[rows] = np.clip(moved, 0.0, cap[rows, None])
    return out
