"""IMDB sentiment classifier: token ids [B, L] -> embedding -> LSTM -> attention pooling -> logits [B, 2]."""

from __future__ import annotations

import torch
import torch.nn as nn


class AttentionLSTM(nn.Module):
    """Embedding, (bi)LSTM, additive attention over non-pad positions, linear head."""

    def __init__(
        self,
        vocab: int = 20_000,
        embed: int = 64,
        hidden: int = 64,
        layers: int = 1,
        bidirectional: bool = False,
        classes: int = 2,
    ):
        super().__init__()
        self.embedding = nn.Embedding(vocab, embed, padding_idx=0)
        self.lstm = nn.LSTM(embed, hidden, num_layers=layers, batch_first=True, bidirectional=bidirectional)
        out = hidden * (2 if bidirectional else 1)
        self.score = nn.Sequential(nn.Linear(out, out), nn.Tanh(), nn.Linear(out, 1))
        self.head = nn.Linear(out, classes)

    def forward(self, ids: torch.Tensor) -> torch.Tensor:
        h, _ = self.lstm(self.embedding(ids))  # [B, L, out]
        s = self.score(h).squeeze(-1).masked_fill(ids == 0, float("-inf"))  # [B, L]
        w = torch.softmax(s, dim=1).nan_to_num(0.0)
        return self.head((w.unsqueeze(-1) * h).sum(dim=1))
