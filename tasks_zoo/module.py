"""The LightningModule every zoo configuration trains: Adam (no weight decay, no scheduler), mean-reduced loss."""

from __future__ import annotations

import lightning as L
import torch
import torch.nn as nn
import torch.nn.functional as F


class ImageInput(nn.Module):
    """uint8 images [B, C, H, W] -> float, optionally channel-normalised."""

    def __init__(self, mean=None, std=None):
        super().__init__()
        c = len(mean) if mean is not None else 1
        self.register_buffer(
            "mean", torch.tensor(mean if mean is not None else [0.0]).view(1, c, 1, 1), persistent=False
        )
        self.register_buffer("std", torch.tensor(std if std is not None else [1.0]).view(1, c, 1, 1), persistent=False)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return (x.float() / 255.0 - self.mean) / self.std


LOSSES = {
    "cross_entropy": lambda logits, y: F.cross_entropy(logits, y),  # logits [B, C], y [B] int
    "bce": lambda logits, y: F.binary_cross_entropy_with_logits(logits, y),  # logits [B, K], y [B, K] in {0, 1}
}


class ZooTask(L.LightningModule):
    """Wraps ``net`` (input prep included); ``training_step`` returns the mean-reduced batch loss (scalar)."""

    def __init__(self, net: nn.Module, loss: str, lr: float):
        super().__init__()
        self.net, self.loss_fn, self.lr = net, LOSSES[loss], float(lr)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.net(x)

    def training_step(self, batch, batch_idx):
        x, y = batch
        return self.loss_fn(self.net(x), y)

    def configure_optimizers(self):
        return torch.optim.Adam(self.parameters(), lr=self.lr, weight_decay=0.0)
