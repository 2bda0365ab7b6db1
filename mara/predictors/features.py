"""Inputs of the flow predictor (paper §4.1): per-observation features and the static context.

Shapes: ``B`` tasks, ``H`` padded history length, features ``[B, H, 4]``, static ``[B, 4]``.
"""
from __future__ import annotations

import numpy as np

N_HIST_FEATURES = 4
N_STATIC = 4


def history_features(S: np.ndarray, L: np.ndarray, lengths: np.ndarray) -> np.ndarray:
    """[log S, log(L/L_now), Δlog S, Δlog(L/L_now)] per observation, zero past each length: [B, H] -> [B, H, 4]."""
    S = np.asarray(S, np.float64)
    L = np.asarray(L, np.float64)
    lengths = np.asarray(lengths, np.int64)
    B, H = S.shape
    valid = np.arange(H)[None, :] < lengths[:, None]
    last = np.clip(lengths - 1, 0, H - 1)
    L_now = L[np.arange(B), last]
    logS = np.log(np.where(valid, S, 1.0))
    logL = np.log(np.where(valid, L, 1.0) / np.where(valid, L_now[:, None], 1.0))
    d_logS = np.diff(logS, axis=1, prepend=logS[:, :1])
    d_logL = np.diff(logL, axis=1, prepend=logL[:, :1])
    x = np.stack([logS, logL, d_logS, d_logL], axis=-1)
    return np.where(valid[..., None], x, 0.0)


def static_context(batch_size, lr, L_now, horizon_samples) -> np.ndarray:
    """[log bs, log lr, log L_now, log horizon] (ε deliberately excluded): four [B] arrays -> [B, 4]."""
    cols = [batch_size, lr, L_now, horizon_samples]
    return np.stack([np.log(np.maximum(np.asarray(c, np.float64), 1e-12)) for c in cols], axis=-1)
