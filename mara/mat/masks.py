"""Eq. 2 as a mask: which choices each node may take given the earlier nodes' picks (shared by both decoders)."""

from __future__ import annotations

import torch


def choice_mask(present: torch.Tensor, actions: torch.Tensor) -> torch.Tensor:
    """Allowed choices per node: present slots not taken by earlier nodes, plus idle.

    present [E, K] bool, actions [E, M] long in 0..K -> allow [E, M, K+1] bool
    """
    E, M = actions.shape
    K = present.shape[1]
    chosen = actions[..., None] == torch.arange(K, device=actions.device)  # [E, M, K]
    allow = torch.empty((E, M, K + 1), dtype=torch.bool, device=actions.device)
    allow[..., K] = True  # idle
    open_slots = present
    for i in range(M):  # M small: one [E, K] step per node beats one-hot + cumsum over [E, M, K] (PPO speed)
        allow[:, i, :K] = open_slots
        open_slots = open_slots & ~chosen[:, i]
    return allow
