"""Fixed-length future targets (paper Eq. 4–6) as pure float64 numpy functions.

Shapes: ``B`` examples, ``K = n_bins`` (32), edges ``[B, K+1]``; ``N`` samples where noted.
C(s) = s·L(s) is the cumulative loss sum in sample units; within a batch every sample carries that
batch's loss, so C is piecewise linear in samples and linear interpolation of C is exact.
"""

from __future__ import annotations

import numpy as np

DELTA = 1e-4


def bin_edges(S0: np.ndarray, h: np.ndarray, n_bins: int = 32) -> np.ndarray:
    """Equal-width boundaries s_j = S0 + j·h/K, j = 0..K (Eq. 4): [B] -> [B, K+1]."""
    j = np.arange(n_bins + 1, dtype=np.float64)
    return np.asarray(S0, np.float64)[:, None] + j[None, :] * np.asarray(h, np.float64)[:, None] / n_bins


def interp_C(C_batches: np.ndarray, batch_size: np.ndarray, s: np.ndarray) -> np.ndarray:
    """Linear interpolation of C at samples s [B, J]; C_batches [B, N] holds C after batch 1..N (sample units)."""
    C0 = np.concatenate([np.zeros((C_batches.shape[0], 1)), C_batches], axis=1)  # C at batch 0..N
    t = s / np.asarray(batch_size, np.float64)[:, None]
    i = np.clip(np.floor(t).astype(np.int64), 0, C_batches.shape[1] - 1)
    frac = t - i
    rows = np.arange(C0.shape[0])[:, None]
    lo, hi = C0[rows, i], C0[rows, i + 1]
    return lo + frac * (hi - lo)


def interval_targets(C_edges: np.ndarray, s_edges: np.ndarray, L0: np.ndarray, delta: float = DELTA) -> np.ndarray:
    """Eq. 5: interval averages ℓ̄_j = ΔC/Δs and y_j = log((ℓ̄_j+δ)/(L(S0)+δ)): [B, K+1] edges -> y [B, K]."""
    ell = np.diff(C_edges, axis=-1) / np.diff(s_edges, axis=-1)
    return np.log((ell + delta) / (np.asarray(L0, np.float64)[..., None] + delta))


def reconstruct_L(y: np.ndarray, s_edges: np.ndarray, L0: np.ndarray, delta: float = DELTA):
    """Eq. 6 inverse: y [..., K] with edges [..., K+1] (broadcastable) -> (Ĉ, L̂) at every edge [..., K+1].

    ``L0`` is L(S0) broadcastable to y's leading shape; Ĉ(s_0) = S0·L0 is preserved exactly.
    """
    L0 = np.asarray(L0, np.float64)
    ell = (L0[..., None] + delta) * np.exp(y) - delta
    ds = np.diff(s_edges, axis=-1)
    C0 = s_edges[..., :1] * L0[..., None]
    C = np.concatenate([np.broadcast_to(C0, ell.shape[:-1] + (1,)), C0 + np.cumsum(ds * ell, axis=-1)], axis=-1)
    return C, C / s_edges
