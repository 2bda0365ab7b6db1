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
"""
from __future__ import annotations

import numpy as np

N_HIST_FEATURES = 4
N_STATIC = 4
FEATURE_SETS = ("v1", "v2")
N_STATIC_BY_SET = {"v1": 4, "v2": 2}


def history_features(S: np.ndarray, L: np.ndarray, lengths: np.ndarray, batch_size=None, feature_set: str = "v1") -> np.ndarray:
    """[log t, log(L/L_now), Δlog t, Δlog(L/L_now)] per observation (t = S for v1, S/bs for v2), zero past each
    length: [B, H] -> [B, H, 4]."""
    S = np.asarray(S, np.float64)
    L = np.asarray(L, np.float64)
    lengths = np.asarray(lengths, np.int64)
    B, H = S.shape
    valid = np.arange(H)[None, :] < lengths[:, None]
    last = np.clip(lengths - 1, 0, H - 1)
    L_now = L[np.arange(B), last]
    if feature_set == "v2":
        S = S / np.asarray(batch_size, np.float64)[:, None]
    elif feature_set != "v1":
        raise ValueError(f"feature_set must be one of {FEATURE_SETS}, got {feature_set!r}")
    logS = np.log(np.where(valid, S, 1.0))
    logL = np.log(np.where(valid, L, 1.0) / np.where(valid, L_now[:, None], 1.0))
    d_logS = np.diff(logS, axis=1, prepend=logS[:, :1])
    d_logL = np.diff(logL, axis=1, prepend=logL[:, :1])
    x = np.stack([logS, logL, d_logS, d_logL], axis=-1)
    return np.where(valid[..., None], x, 0.0)


def static_context(batch_size, lr, L_now, horizon_samples, feature_set: str = "v1") -> np.ndarray:
    """v1: [log bs, log lr, log L_now, log horizon] (ε deliberately excluded); v2: [log lr, log horizon/bs].
    [B] arrays -> [B, n_static]."""
    if feature_set == "v1":
        cols = [batch_size, lr, L_now, horizon_samples]
    elif feature_set == "v2":
        cols = [lr, np.asarray(horizon_samples, np.float64) / np.asarray(batch_size, np.float64)]
    else:
        raise ValueError(f"feature_set must be one of {FEATURE_SETS}, got {feature_set!r}")
    return np.stack([np.log(np.maximum(np.asarray(c, np.float64), 1e-12)) for c in cols], axis=-1)
