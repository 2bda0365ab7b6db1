"""CIFAR-10 classifiers: small CNN, 32x32 ResNets, row-reading LSTM, SimpleViT. Input float [B, 3, 32, 32] ->
logits [B, 10]."""

from __future__ import annotations

import torch
import torch.nn as nn
import torchvision


class SmallCNN(nn.Module):
    """Two conv-pool stages + MLP head: [B, 3, 32, 32] -> [B, classes]."""

    def __init__(self, channels: tuple[int, int] = (32, 64), hidden: int = 128, classes: int = 10):
        super().__init__()
        c1, c2 = channels
        self.features = nn.Sequential(
            nn.Conv2d(3, c1, 3, padding=1),
            nn.ReLU(),
            nn.MaxPool2d(2),
            nn.Conv2d(c1, c2, 3, padding=1),
            nn.ReLU(),
            nn.MaxPool2d(2),
        )
        self.head = nn.Sequential(nn.Flatten(), nn.Linear(c2 * 8 * 8, hidden), nn.ReLU(), nn.Linear(hidden, classes))

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.head(self.features(x))


def resnet_cifar(depth: int = 18, classes: int = 10, stem: str = "torchvision") -> nn.Module:
    """torchvision ResNet-18/34 with a 10-class head: [B, 3, 32, 32] -> [B, classes].

    ``stem="torchvision"`` (default) keeps the 7x7/2 stem and max-pool, so a 32x32 image reaches layer4 at
    1x1 and one b32 step costs ~0.1 s on two CPU threads (the reference cost this project is sized for);
    ``stem="cifar"`` swaps in a 3x3/1 stem without max-pool (the usual CIFAR variant, ~16x the compute).
    """
    builders = {18: torchvision.models.resnet18, 34: torchvision.models.resnet34}
    net = builders[depth](num_classes=classes)
    if stem == "cifar":
        net.conv1 = nn.Conv2d(3, 64, kernel_size=3, stride=1, padding=1, bias=False)
        net.maxpool = nn.Identity()
    elif stem != "torchvision":
        raise ValueError(f"ResNet stem must be 'torchvision' or 'cifar', got {stem!r}")
    return net


class RowLSTM(nn.Module):
    """Reads image rows as a sequence (32 steps x 96 features): [B, 3, 32, 32] -> [B, classes]."""

    def __init__(self, hidden: int = 128, layers: int = 1, classes: int = 10):
        super().__init__()
        self.lstm = nn.LSTM(96, hidden, num_layers=layers, batch_first=True)
        self.head = nn.Linear(hidden, classes)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        rows = x.permute(0, 2, 1, 3).flatten(2)  # [B, 32, 96]
        out, _ = self.lstm(rows)
        return self.head(out[:, -1])


def sincos_2d(h: int, w: int, dim: int, temperature: float = 10_000.0) -> torch.Tensor:
    """Fixed 2-D sine-cosine position embedding -> [h * w, dim]."""
    y, x = torch.meshgrid(torch.arange(h), torch.arange(w), indexing="ij")
    omega = 1.0 / temperature ** (torch.arange(dim // 4) / (dim // 4 - 1))
    y = y.flatten()[:, None] * omega[None]
    x = x.flatten()[:, None] * omega[None]
    return torch.cat((x.sin(), x.cos(), y.sin(), y.cos()), dim=1).float()


class SimpleViT(nn.Module):
    """Patch-embedding ViT (pre-norm blocks, sin-cos positions, mean pooling): [B, 3, 32, 32] -> [B, classes]."""

    def __init__(
        self,
        patch: int = 4,
        dim: int = 64,
        depth: int = 4,
        heads: int = 4,
        mlp: int = 128,
        classes: int = 10,
        image: int = 32,
    ):
        super().__init__()
        grid = image // patch
        self.embed = nn.Sequential(
            nn.Conv2d(3, dim, kernel_size=patch, stride=patch),  # [B, dim, grid, grid]
            nn.Flatten(2),
        )
        self.norm_in = nn.LayerNorm(dim)
        self.register_buffer("pos", sincos_2d(grid, grid, dim), persistent=False)
        layer = nn.TransformerEncoderLayer(
            dim, heads, mlp, dropout=0.0, activation="gelu", batch_first=True, norm_first=True
        )
        self.blocks = nn.TransformerEncoder(layer, depth, enable_nested_tensor=False)
        self.head = nn.Sequential(nn.LayerNorm(dim), nn.Linear(dim, classes))

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        tokens = self.norm_in(self.embed(x).transpose(1, 2)) + self.pos  # [B, grid*grid, dim]
        return self.head(self.blocks(tokens).mean(dim=1))
