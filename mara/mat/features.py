"""Observation → task-slot tokens for the MAT policy (§4.2).

Shapes: ``[E, K, F]`` episodes × task slots × features; ``present [E, K]`` bool. Batch and step counts are
divided by ``scale`` (≈ the largest budget) so typical values lie in [0, 2].
"""
from __future__ import annotations

import numpy as np
import torch

from mara.sim.env import Observation

N_SLOT_FEATURES = 7
N_GLOBAL_FEATURES = 3
N_FEATURES = N_SLOT_FEATURES + N_GLOBAL_FEATURES


def obs_to_tokens(obs: Observation, scale: float = 350.0) -> tuple[torch.Tensor, torch.Tensor]:
    """One token per slot: per-slot state (zero where absent), then the normalised node / active / queued counts.

    -> (tokens [E, K, F] float32, present [E, K] bool)
    """
    present = obs.present
    K = obs.max_active
    pred = np.clip(obs.pred_remaining / scale, 0.0, 3.0)
    rem = np.clip(obs.remaining_time / scale, 0.0, 3.0)
    slack = np.clip((obs.remaining_time - obs.pred_remaining) / scale, -3.0, 3.0)
    per_slot = np.stack(
        [
            present.astype(np.float64),
            pred,
            rem,
            slack,
            obs.warmup,
            np.clip(obs.processed / scale, 0.0, 3.0),
            (obs.pred_remaining <= obs.remaining_time).astype(np.float64),  # predicted feasible if served every step
        ],
        axis=-1,
    ) * present[..., None]
    E = present.shape[0]
    glob = np.stack(
        [np.full(E, obs.n_nodes / K), obs.n_active / K, np.minimum(obs.n_queued / K, 3.0)], axis=-1
    )  # [E, 3]
    tokens = np.concatenate([per_slot, np.broadcast_to(glob[:, None, :], (E, K, 3))], axis=-1)
    return torch.as_tensor(tokens, dtype=torch.float32), torch.as_tensor(present)
