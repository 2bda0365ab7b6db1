"""YESNO word classifier: Transformer encoder over log-mel frames [B, T, n_mels] -> 8 yes/no logits [B, 8]."""

from __future__ import annotations

import math

import torch
import torch.nn as nn


def sincos_1d(length: int, dim: int) -> torch.Tensor:
    """Fixed sine-cosine position embedding -> [length, dim]."""
    pos = torch.arange(length, dtype=torch.float32)[:, None]
    freq = torch.exp(-math.log(10_000.0) * torch.arange(0, dim, 2, dtype=torch.float32) / dim)
    pe = torch.zeros(length, dim)
    pe[:, 0::2] = torch.sin(pos * freq)
    pe[:, 1::2] = torch.cos(pos * freq)
    return pe


class AudioTransformer(nn.Module):
    """Strided conv front-end, Transformer encoder, pooling into 8 word segments, shared linear head."""

    def __init__(
        self,
        n_mels: int = 40,
        dim: int = 64,
        depth: int = 2,
        heads: int = 4,
        mlp: int = 128,
        words: int = 8,
        max_len: int = 512,
    ):
        super().__init__()
        self.front = nn.Conv1d(n_mels, dim, kernel_size=3, stride=2, padding=1)
        self.register_buffer("pos", sincos_1d(max_len, dim), persistent=False)
        layer = nn.TransformerEncoderLayer(
            dim, heads, mlp, dropout=0.0, activation="gelu", batch_first=True, norm_first=True
        )
        self.encoder = nn.TransformerEncoder(layer, depth, enable_nested_tensor=False)
        self.pool = nn.AdaptiveAvgPool1d(words)
        self.head = nn.Sequential(nn.LayerNorm(dim), nn.Linear(dim, 1))

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        h = self.front(x.transpose(1, 2)).transpose(1, 2)  # [B, T/2, dim]
        h = self.encoder(h + self.pos[: h.shape[1]])
        seg = self.pool(h.transpose(1, 2)).transpose(1, 2)  # [B, 8, dim]
        return self.head(seg).squeeze(-1)  # [B, 8]
