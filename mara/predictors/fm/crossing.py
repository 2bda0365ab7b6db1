"""Threshold-crossing decoder: first crossing of ε on a reconstructed curve → remaining batches.

Shapes: ``[..., J]`` curve values at sample positions (J = K+1 bin edges, edge 0 = the prefix end).
"""

from __future__ import annotations

import numpy as np


def decode_crossing(s_edges, L_edges, eps, batch_size, cap_remaining) -> np.ndarray:
    """First j with L̂(s_j) ≤ ε, linear interpolation inside [s_{j−1}, s_j] → ⌈(s* − s_0)/bs⌉ capped; no crossing → cap.

    s_edges, L_edges [..., J]; eps, batch_size, cap_remaining broadcastable to [...] -> [...] float batches.
    """
    s_edges = np.asarray(s_edges, np.float64)
    L_edges = np.asarray(L_edges, np.float64)
    eps = np.asarray(eps, np.float64)
    cap = np.broadcast_to(np.asarray(cap_remaining, np.float64), L_edges.shape[:-1])
    s_edges = np.broadcast_to(s_edges, L_edges.shape)
    hit = L_edges <= eps[..., None]
    any_hit = hit.any(axis=-1)
    j = hit.argmax(axis=-1)
    jp = np.maximum(j - 1, 0)
    take = lambda a, k: np.take_along_axis(a, k[..., None], axis=-1)[..., 0]
    L_a, L_b = take(L_edges, jp), take(L_edges, j)
    s_a, s_b = take(s_edges, jp), take(s_edges, j)
    denom = L_a - L_b
    frac = np.where(denom > 0, (L_a - eps) / np.where(denom > 0, denom, 1.0), 1.0)
    s_star = np.where(j == 0, s_edges[..., 0], s_a + np.clip(frac, 0.0, 1.0) * (s_b - s_a))
    rem = np.ceil((s_star - s_edges[..., 0]) / np.asarray(batch_size, np.float64) - 1e-9)
    rem = np.where(any_hit, rem, cap)
    return np.clip(rem, 0.0, cap)
