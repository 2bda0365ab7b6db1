"""Seeded, fixed-size, per-epoch reshuffled mini-batch loaders over in-memory tensors, resumable mid-epoch.

The loader is torchdata's ``StatefulDataLoader`` (``state_dict()`` / ``load_state_dict()``). Its data order is the
one the curve bank was generated with: a plain ``torch.utils.data.DataLoader(shuffle=True, drop_last=True,
generator=torch.Generator().manual_seed(seed))`` fed to a Lightning ``Trainer``. Per epoch that loader's iterator
takes one int64 from the generator (its base seed) and its ``RandomSampler`` one ``randperm(n)`` on the first index;
Lightning knows the loader's length and starts the next epoch after the last full batch, so the sampler's trailing
``randperm`` (drawn only when it is iterated to exhaustion) never happens. torchdata's own ``RandomSampler`` draws its
permutation when the iterator is created, before the base seed, so it would reorder every curve;
``EpochShuffleSampler`` keeps the bank's order and makes it resumable: its iterator's state is (generator state at the
epoch start, indices yielded).
"""

from __future__ import annotations

import warnings

import torch
from torch.utils.data import Dataset, Sampler, SequentialSampler


class TensorPairs(Dataset):
    """Pairs ``(transform(x[i]), y[i])``; ``x [N, ...]`` stored compactly (e.g. uint8), converted per item."""

    def __init__(self, x: torch.Tensor, y: torch.Tensor, transform=None):
        self.x, self.y, self.transform = x, y, transform

    def __len__(self) -> int:
        return len(self.y)

    def __getitem__(self, i):
        x = self.x[i]
        return (self.transform(x) if self.transform else x), self.y[i]


class _EpochShuffleIter:
    """One epoch of ``EpochShuffleSampler``; stateful (torchdata restores it through the batch sampler)."""

    def __init__(self, sampler: "EpochShuffleSampler"):
        self.sampler = sampler
        self.epoch_start = sampler.generator.get_state()  # before the loader iterator's base-seed draw
        self.perm: list[int] | None = None
        self.yielded = 0

    def __iter__(self):
        return self

    def __next__(self) -> int:
        if self.perm is None:
            self.perm = torch.randperm(self.sampler.n, generator=self.sampler.generator).tolist()
        if self.yielded >= self.sampler.n:
            raise StopIteration
        self.yielded += 1
        return self.perm[self.yielded - 1]

    def state_dict(self) -> dict:
        return {"epoch_start": self.epoch_start.clone(), "yielded": self.yielded}

    def load_state_dict(self, state: dict) -> None:
        gen = self.sampler.generator
        gen.set_state(state["epoch_start"])
        self.epoch_start = state["epoch_start"].clone()
        torch.empty((), dtype=torch.int64).random_(generator=gen)  # the loader iterator's base seed
        self.perm = torch.randperm(self.sampler.n, generator=gen).tolist()
        self.yielded = int(state["yielded"])


class EpochShuffleSampler(Sampler[int]):
    """A fresh permutation of ``range(n)`` per epoch from ``generator`` (shared with the loader), drawn as
    ``torch.utils.data.RandomSampler`` draws it under Lightning; the iterator is resumable (module docstring)."""

    def __init__(self, n: int, generator: torch.Generator):
        self.n, self.generator = int(n), generator

    def __len__(self) -> int:
        return self.n

    def __iter__(self):
        return _EpochShuffleIter(self)


def seeded_loader(dataset: Dataset, batch_size: int, seed: int, shuffle: bool = True):
    """Full mini-batches only (drop_last), reshuffled each epoch from a generator seeded with ``seed``
    (``shuffle=False``: the data set's own order every epoch), as a resumable ``StatefulDataLoader``."""
    from torchdata.stateful_dataloader import StatefulDataLoader

    if len(dataset) < batch_size:
        raise ValueError(f"dataset of {len(dataset)} samples is smaller than batch size {batch_size}")
    gen = torch.Generator().manual_seed(int(seed))
    sampler = EpochShuffleSampler(len(dataset), gen) if shuffle else SequentialSampler(dataset)
    with warnings.catch_warnings():  # torchdata 0.11 calls torch.set_vital, deprecated in torch 2.14: one line per job
        warnings.filterwarnings("ignore", message=".*set_vital.*")
        return StatefulDataLoader(
            dataset, batch_size=batch_size, sampler=sampler, drop_last=True, generator=gen, num_workers=0
        )


class ResumableBatches:
    """Endless mini-batches from a ``seeded_loader`` (epoch after epoch), one per ``next()``; the position is the
    loader's ``state_dict()``, so a job resumes exactly where it stopped, in another process too."""

    def __init__(self, loader):
        self.loader = loader
        self.shuffle = isinstance(loader.sampler, EpochShuffleSampler)
        self._it = None

    def next(self):
        if self._it is None:
            self._it = iter(self.loader)
        try:
            return next(self._it)
        except StopIteration:
            self._it = iter(self.loader)
            return next(self._it)

    def state_dict(self) -> dict:
        return self.loader.state_dict()

    def load_state_dict(self, state: dict) -> None:
        self.loader.load_state_dict(state)
        self._it = iter(self.loader)
