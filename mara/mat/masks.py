"""Eq. 2 as a mask: which choices each node may take given the earlier nodes' picks (shared by both decoders)."""
from __future__ import annotations

import torch
from torch.nn import functional as F


def choice_mask(present: torch.Tensor, actions: torch.Tensor) -> torch.Tensor:
    """Allowed choices per node: present slots not taken by earlier nodes, plus idle.

    present [E, K] bool, actions [E, M] long in 0..K -> allow [E, M, K+1] bool
    """
    K = present.shape[1]
    chosen = F.one_hot(actions, K + 1)[..., :K]  # [E, M, K]
    taken_before = chosen.cumsum(dim=1) - chosen
    allow_slot = present[:, None, :] & (taken_before == 0)
    idle = torch.ones_like(allow_slot[..., :1])
    return torch.cat([allow_slot, idle], dim=-1)
