"""Seeded, fixed-size, per-epoch reshuffled mini-batch loaders over in-memory tensors."""
from __future__ import annotations

import torch
from torch.utils.data import DataLoader, Dataset


class TensorPairs(Dataset):
    """Pairs ``(transform(x[i]), y[i])``; ``x [N, ...]`` stored compactly (e.g. uint8), converted per item."""

    def __init__(self, x: torch.Tensor, y: torch.Tensor, transform=None):
        self.x, self.y, self.transform = x, y, transform

    def __len__(self) -> int:
        return len(self.y)

    def __getitem__(self, i):
        x = self.x[i]
        return (self.transform(x) if self.transform else x), self.y[i]


def seeded_loader(dataset: Dataset, batch_size: int, seed: int, shuffle: bool = True) -> DataLoader:
    """Full mini-batches only (drop_last), reshuffled each epoch from a generator seeded with ``seed``
    (``shuffle=False``: the data set's own order every epoch)."""
    if len(dataset) < batch_size:
        raise ValueError(f"dataset of {len(dataset)} samples is smaller than batch size {batch_size}")
    gen = torch.Generator().manual_seed(int(seed))
    return DataLoader(dataset, batch_size=batch_size, shuffle=shuffle, drop_last=True, generator=gen, num_workers=0)
