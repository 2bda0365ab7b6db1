"""LARA's estimator: exponentially weighted least squares on a power law in log space (LARA.md).

Shapes: ``B`` tasks, ``H`` padded history length. ``ln L = θ₀ + θ₁ ln S``; weights ``γ^(n−i)`` decay per
observation; the regressor is centred at the current ``ln S_now`` so the 2×2 system stays well
conditioned with γ = 0.9, and the tiny ridge only regularises the centred coefficients.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

MIN_OBS = 4


@dataclass
class WLSStats:
    """Running sufficient statistics ``A = Σ w x xᵀ`` [B,2,2], ``c = Σ w x y`` [B,2] with x = [1, ln S − centre]."""

    A: np.ndarray
    c: np.ndarray
    centre: np.ndarray  # [B] fixed centring of ln S


def wls_init(centre: np.ndarray) -> WLSStats:
    """Empty statistics for ``B`` tasks with a fixed ln-S centring [B]."""
    centre = np.asarray(centre, dtype=np.float64)
    B = centre.shape[0]
    return WLSStats(np.zeros((B, 2, 2)), np.zeros((B, 2)), centre)


def wls_update(stats: WLSStats, S: np.ndarray, L: np.ndarray, gamma: float = 0.9, active=None) -> WLSStats:
    """O(1) recursion ``A ← γA + x xᵀ``, ``c ← γc + x ln L`` for one new observation per task (``active`` [B] bool)."""
    x = np.stack([np.ones_like(S, dtype=np.float64), np.log(S) - stats.centre], axis=-1)  # [B, 2]
    A = gamma * stats.A + x[:, :, None] * x[:, None, :]
    c = gamma * stats.c + x * np.log(L)[:, None]
    if active is not None:
        A = np.where(active[:, None, None], A, stats.A)
        c = np.where(active[:, None], c, stats.c)
    return WLSStats(A, c, stats.centre)


def wls_solve(stats: WLSStats, ridge: float = 1e-10) -> tuple[np.ndarray, np.ndarray]:
    """θ̂ = (λI + A)⁻¹ c, returned un-centred as (θ₀ [B], θ₁ [B])."""
    a00, a01, a11 = stats.A[:, 0, 0] + ridge, stats.A[:, 0, 1], stats.A[:, 1, 1] + ridge
    det = a00 * a11 - a01 * a01
    det = np.where(np.abs(det) > 0, det, np.inf)
    t0c = (a11 * stats.c[:, 0] - a01 * stats.c[:, 1]) / det
    t1 = (a00 * stats.c[:, 1] - a01 * stats.c[:, 0]) / det
    return t0c - t1 * stats.centre, t1


def wls_fit(S: np.ndarray, L: np.ndarray, lengths: np.ndarray, gamma: float = 0.9, ridge: float = 1e-10):
    """Fit every padded history at once: S, L [B, H], lengths [B] -> (θ₀ [B], θ₁ [B]).

    Equal to running ``wls_update`` over each history (same weights γ^(n−i), centring at ln S_now).
    """
    S = np.asarray(S, dtype=np.float64)
    L = np.asarray(L, dtype=np.float64)
    lengths = np.asarray(lengths, dtype=np.int64)
    B, H = S.shape
    idx = np.arange(H)[None, :]
    valid = idx < lengths[:, None]
    last = np.clip(lengths - 1, 0, max(H - 1, 0))
    S_now = S[np.arange(B), last] if H else np.ones(B)
    centre = np.log(np.where(S_now > 0, S_now, 1.0))
    w = np.where(valid, gamma ** np.clip(lengths[:, None] - 1 - idx, 0, None), 0.0)
    u = np.where(valid, np.log(np.where(valid, S, 1.0)) - centre[:, None], 0.0)
    y = np.where(valid, np.log(np.where(valid, L, 1.0)), 0.0)
    A = np.empty((B, 2, 2))
    A[:, 0, 0] = w.sum(1)
    A[:, 0, 1] = A[:, 1, 0] = (w * u).sum(1)
    A[:, 1, 1] = (w * u * u).sum(1)
    c = np.stack([(w * y).sum(1), (w * u * y).sum(1)], axis=-1)
    return wls_solve(WLSStats(A, c, centre), ridge)


def wls_remaining(theta0, theta1, S_now, eps, batch_size, cap_remaining) -> np.ndarray:
    """Remaining batches to the fitted crossing of ε, ``⌈max(0, S* − S_now)/bs⌉`` capped; θ₁ ≥ 0 → cap. All [B]."""
    theta1 = np.asarray(theta1, dtype=np.float64)
    cap = np.asarray(cap_remaining, dtype=np.float64)
    decreasing = theta1 < 0
    safe_t1 = np.where(decreasing, theta1, -1.0)
    with np.errstate(over="ignore", invalid="ignore"):
        log_s_star = (np.log(eps) - theta0) / safe_t1
        rem_samples = np.maximum(0.0, np.exp(np.minimum(log_s_star, 700.0)) - S_now)
        rem = np.ceil(rem_samples / np.asarray(batch_size, dtype=np.float64) - 1e-9)
    rem = np.where(decreasing & np.isfinite(rem), rem, cap)
    return np.clip(rem, 0.0, cap)


def wls_slope_se(S, L, lengths, theta0, theta1, gamma: float = 0.9) -> np.ndarray:
    """Heuristic standard error of θ₁: weighted residual variance σ² = Σw r²/max(Σw − 2, 1) times (A⁻¹)₁₁. [B]."""
    S = np.asarray(S, np.float64)
    L = np.asarray(L, np.float64)
    lengths = np.asarray(lengths, np.int64)
    B, H = S.shape
    idx = np.arange(H)[None, :]
    valid = idx < lengths[:, None]
    centre = np.log(S[np.arange(B), np.clip(lengths - 1, 0, H - 1)])
    w = np.where(valid, gamma ** np.clip(lengths[:, None] - 1 - idx, 0, None), 0.0)
    lnS = np.log(np.where(valid, S, 1.0))
    r = np.where(valid, np.log(np.where(valid, L, 1.0)) - theta0[:, None] - theta1[:, None] * lnS, 0.0)
    u = np.where(valid, lnS - centre[:, None], 0.0)
    a00, a01, a11 = w.sum(1), (w * u).sum(1), (w * u * u).sum(1)
    det = np.maximum(a00 * a11 - a01 * a01, 1e-300)
    sigma2 = (w * r * r).sum(1) / np.maximum(a00 - 2.0, 1.0)
    return np.sqrt(sigma2 * a00 / det)


class WLSPredictor:
    """RemainingPredictor using ``wls_fit`` + ``wls_remaining`` (LARA).

    ``predict_quantiles`` gives a heuristic band, not a calibrated one: the crossing under slopes θ₁ ∓ z·se(θ₁)
    (z = 1.2816, the normal q10/q90) through the same current point, se from the weighted residuals
    (``wls_slope_se``). With the γ-weighted, nearly noise-free cumulative-average prefixes it is narrow."""

    name = "wls"

    def __init__(self, gamma: float = 0.9, ridge: float = 1e-10, min_obs: int = MIN_OBS, band_z: float = 1.2816):
        self.gamma, self.ridge, self.min_obs, self.band_z = float(gamma), float(ridge), int(min_obs), float(band_z)

    @classmethod
    def from_config(cls, cfg, bank_path=None) -> "WLSPredictor":
        return cls(
            gamma=cfg.get("gamma", 0.9),
            ridge=cfg.get("ridge", 1e-10),
            min_obs=cfg.get("min_obs", MIN_OBS),
            band_z=cfg.get("band_z", 1.2816),
        )

    def predict_quantiles(self, S, L, lengths, eps, cap_remaining, batch_size, lr, family=None) -> np.ndarray:
        """[B, 3] = (lo, median, hi) remaining batches: steeper slope → sooner (lo), flatter → later (hi)."""
        lengths = np.asarray(lengths, dtype=np.int64)
        cap = np.asarray(cap_remaining, dtype=np.float64)
        out = np.repeat(cap[:, None], 3, axis=1)
        warm = lengths >= self.min_obs
        if warm.any():
            S_w, L_w, n_w = np.asarray(S, np.float64)[warm], np.asarray(L, np.float64)[warm], lengths[warm]
            t0, t1 = wls_fit(S_w, L_w, n_w, self.gamma, self.ridge)
            S_now = S_w[np.arange(len(n_w)), n_w - 1]
            se = wls_slope_se(S_w, L_w, n_w, t0, t1, self.gamma)
            logc = np.log(S_now)
            args = (S_now, np.asarray(eps, np.float64)[warm], np.asarray(batch_size)[warm], cap[warm])
            cols = []
            for d in (-self.band_z, 0.0, self.band_z):
                t1d = t1 + d * se
                cols.append(wls_remaining(t0 + t1 * logc - t1d * logc, t1d, *args))
            out[warm] = np.sort(np.stack(cols, axis=1), axis=1)
        return out

    def predict_remaining(self, S, L, lengths, eps, cap_remaining, batch_size, lr, family=None) -> np.ndarray:
        lengths = np.asarray(lengths, dtype=np.int64)
        cap = np.asarray(cap_remaining, dtype=np.float64)
        out = cap.copy()
        warm = lengths >= self.min_obs
        if warm.any():
            S_w, L_w, n_w = np.asarray(S, np.float64)[warm], np.asarray(L, np.float64)[warm], lengths[warm]
            t0, t1 = wls_fit(S_w, L_w, n_w, self.gamma, self.ridge)
            S_now = S_w[np.arange(len(n_w)), n_w - 1]
            out[warm] = wls_remaining(
                t0, t1, S_now, np.asarray(eps, np.float64)[warm], np.asarray(batch_size)[warm], cap[warm]
            )
        return out
