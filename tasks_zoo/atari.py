"""DAgger policy network for Atari: frame stacks [B, 4, 84, 84] -> action logits [B, 18]."""

from __future__ import annotations

import torch
import torch.nn as nn


class DAggerCNN(nn.Module):
    """Nature-DQN style conv torso + MLP head."""

    def __init__(self, frames: int = 4, actions: int = 18, hidden: int = 512):
        super().__init__()
        self.net = nn.Sequential(
            nn.Conv2d(frames, 32, 8, stride=4),
            nn.ReLU(),
            nn.Conv2d(32, 64, 4, stride=2),
            nn.ReLU(),
            nn.Conv2d(64, 64, 3, stride=1),
            nn.ReLU(),
            nn.Flatten(),
            nn.Linear(64 * 7 * 7, hidden),
            nn.ReLU(),
            nn.Linear(hidden, actions),
        )

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.net(x)
