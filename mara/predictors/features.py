"""Inputs of the flow predictor (paper §4.1): per-observation features and the static context.

Shapes: ``B`` tasks, ``H`` padded history length, features ``[B, H, 4]``, static ``[B, n_static]``.

Two feature sets (a checkpoint records which one it was trained with; old checkpoints are ``v1``):

- ``v1`` (the paper's): history ``[log S, log(L/L_now), Δlog S, Δlog(L/L_now)]`` with S in samples, static
  ``[log bs, log lr, log L_now, log horizon_samples]``. Batch size and the absolute loss level identify the
  family (audio bs ∈ {1,2,4}, text {4,8}; L_now ≈ ln 10 for CIFAR, ≈ ln 2 for binary tasks), so the net can
  learn per-family answers that do not transfer.
- ``v2`` (scale-free): time in optimiser steps (batches) and the loss only relative to ``L_now``: history
  ``[log n, log(L/L_now), Δlog n, Δlog(L/L_now)]`` with n = S/bs, static ``[log lr, log horizon_batches]``.
  The targets (Eq. 5) are already relative to L(S0), so a v2 prediction is invariant to rescaling the loss
  and to the batch size at fixed step count.
- ``v3``: v2 plus the power-law fit that WLS extrapolates (γ-weighted, LARA.md) as static inputs
  ``[θ₁, ln L̂(S_now) − ln L_now, weighted residual std]``: the net starts from the baseline's extrapolation and
  learns the deviation from it; all three are invariant to loss and sample rescaling.
"""

from __future__ import annotations

import numpy as np

from mara.predictors.wls import wls_fit

N_HIST_FEATURES = 4
N_STATIC = 4
FEATURE_SETS = ("v1", "v2", "v3")
N_STATIC_BY_SET = {"v1": 4, "v2": 2, "v3": 5}


def history_features(
    S: np.ndarray, L: np.ndarray, lengths: np.ndarray, batch_size=None, feature_set: str = "v1"
) -> np.ndarray:
    """[log t, log(L/L_now), Δlog t, Δlog(L/L_now)] per observation (t = S for v1, S/bs for v2), zero past each
    length: [B, H] -> [B, H, 4]."""
    S = np.asarray(S, np.float64)
    L = np.asarray(L, np.float64)
    lengths = np.asarray(lengths, np.int64)
    B, H = S.shape
    valid = np.arange(H)[None, :] < lengths[:, None]
    last = np.clip(lengths - 1, 0, H - 1)
    L_now = L[np.arange(B), last]
    if feature_set in ("v2", "v3"):
        S = S / np.asarray(batch_size, np.float64)[:, None]
    elif feature_set != "v1":
        raise ValueError(f"feature_set must be one of {FEATURE_SETS}, got {feature_set!r}")
    logS = np.log(np.where(valid, S, 1.0))
    logL = np.log(np.where(valid, L, 1.0) / np.where(valid, L_now[:, None], 1.0))
    d_logS = np.diff(logS, axis=1, prepend=logS[:, :1])
    d_logL = np.diff(logL, axis=1, prepend=logL[:, :1])
    x = np.stack([logS, logL, d_logS, d_logL], axis=-1)
    return np.where(valid[..., None], x, 0.0)


def static_context(
    batch_size, lr, L_now, horizon_samples, feature_set: str = "v1", S=None, L=None, lengths=None
) -> np.ndarray:
    """v1: [log bs, log lr, log L_now, log horizon] (ε deliberately excluded); v2: [log lr, log horizon/bs];
    v3: v2 + [θ₁, ln L̂(S_now) − ln L_now, residual std] of the WLS power-law fit of the prefix (needs S, L, lengths).
    [B] arrays -> [B, n_static]."""
    if feature_set == "v1":
        cols = [batch_size, lr, L_now, horizon_samples]
    elif feature_set in ("v2", "v3"):
        cols = [lr, np.asarray(horizon_samples, np.float64) / np.asarray(batch_size, np.float64)]
    else:
        raise ValueError(f"feature_set must be one of {FEATURE_SETS}, got {feature_set!r}")
    out = np.stack([np.log(np.maximum(np.asarray(c, np.float64), 1e-12)) for c in cols], axis=-1)
    if feature_set == "v3":
        out = np.concatenate([out, power_law_features(S, L, lengths)], axis=-1)
    return out


def power_law_features(S, L, lengths, gamma: float = 0.9) -> np.ndarray:
    """[θ₁, ln L̂(S_now) − ln L_now, weighted residual std] of the WLS fit ln L = θ₀ + θ₁ ln S: [B, 3]."""

    S = np.asarray(S, np.float64)
    L = np.asarray(L, np.float64)
    lengths = np.asarray(lengths, np.int64)
    B, H = S.shape
    t0, t1 = wls_fit(S, L, lengths, gamma)
    last = np.clip(lengths - 1, 0, H - 1)
    S_now, L_now = S[np.arange(B), last], L[np.arange(B), last]
    gap = t0 + t1 * np.log(S_now) - np.log(L_now)
    idx = np.arange(H)[None, :]
    valid = idx < lengths[:, None]
    w = np.where(valid, gamma ** np.clip(lengths[:, None] - 1 - idx, 0, None), 0.0)
    r = np.where(
        valid, np.log(np.where(valid, L, 1.0)) - t0[:, None] - t1[:, None] * np.log(np.where(valid, S, 1.0)), 0.0
    )
    sd = np.sqrt((w * r * r).sum(1) / np.maximum(w.sum(1), 1e-12))
    return np.nan_to_num(np.stack([t1, gap, sd], axis=-1))
