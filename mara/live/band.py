"""Does a job's observed loss stay inside the band its own early curve predicts? (a check for unfamiliar job types).

A job of a type no predictor was trained on is scheduled on estimates extrapolated from its own observations. This
check measures whether that extrapolation held for the finished run: LARA's power law ``ln L = θ₀ + θ₁ ln S``
(``baselines/wls.py``, γ-weighted) is fitted to the first half of the job's observations of its running mean loss
L(S) (every ``obs_every`` batches, as the scheduler observed it), and the band is the fitted line through the last
fitted point with slope θ₁ ± z·se(θ₁) (z = 1.2816: WLSPredictor's q10/q90 band), widened by a floor of ``floor``
(5 %) of the loss: on the γ-weighted, nearly noise-free running mean the slope band alone is a fraction of a percent
wide, and a curve is not "unpredictable" for bending by that much. A job whose later observations leave the band is
flagged: its remaining-batch estimates were off, and so were the decisions built on them. The band is heuristic, not
calibrated (as WLSPredictor's): a flag says "look at this curve", not "the predictor failed".
"""

from __future__ import annotations

import numpy as np

from mara.predictors.baselines.wls import MIN_OBS, wls_fit, wls_slope_se

BAND_Z = 1.2816
BAND_FLOOR = 0.05  # relative half-width the band never drops below


def band_exit(losses, obs_every: int, z: float = BAND_Z, floor: float = BAND_FLOOR, min_obs: int = MIN_OBS) -> dict:
    """``{"checked": False}`` with fewer than 2 x ``min_obs`` observations; else the fit's slope and the first
    observation outside the band (``left_at_batch`` None when the curve stayed inside)."""
    ell = np.asarray(losses, dtype=np.float64)
    S = np.arange(obs_every, len(ell) + 1, obs_every, dtype=np.float64)
    if len(S) < 2 * min_obs:
        return {"checked": False}
    L = np.cumsum(ell)[S.astype(np.int64) - 1] / S
    if not np.all(L > 0):  # the power law lives in log space
        return {"checked": False}
    k = len(S) // 2
    t0, t1 = wls_fit(S[None, :k], L[None, :k], np.array([k]))
    se = float(wls_slope_se(S[None, :k], L[None, :k], np.array([k]), t0, t1)[0])
    t0, t1 = float(t0[0]), float(t1[0])
    pivot = np.log(S[k - 1])
    d = np.log(S[k:]) - pivot
    mid = t0 + t1 * pivot
    half = np.hypot(z * se * d, np.log1p(floor))  # log-space half-width: the slope's spread, at least the floor
    lo, hi = np.exp(mid + t1 * d - half), np.exp(mid + t1 * d + half)
    out = (L[k:] < lo) | (L[k:] > hi)
    res = {"checked": True, "fitted_batches": int(S[k - 1]), "slope": t1, "slope_se": se, "left_at_batch": None}
    if out.any():
        i = int(np.argmax(out))
        res |= {"left_at_batch": int(S[k + i]), "observed": float(L[k + i]), "band": [float(lo[i]), float(hi[i])]}
    return res
