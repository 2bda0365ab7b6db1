"""CIFAR-10 data: the real python batches or a learnable synthetic stand-in, as uint8 [N, 3, 32, 32]."""

from __future__ import annotations

import pickle
from pathlib import Path

import numpy as np
import torch
import torch.nn.functional as F

from tasks_zoo.errors import ZooError

MEAN = (0.4914, 0.4822, 0.4465)
STD = (0.2470, 0.2435, 0.2616)


class _BatchUnpickler(pickle.Unpickler):
    """A python batch is a dict of a numpy array, lists, bytes and str: only numpy's array reconstruction may be
    named, so a tampered archive cannot run code when its batches are read."""

    ALLOWED = {
        ("numpy.core.multiarray", "_reconstruct"),
        ("numpy._core.multiarray", "_reconstruct"),
        ("numpy", "ndarray"),
        ("numpy", "dtype"),
    }

    def find_class(self, module: str, name: str):
        if (module, name) not in self.ALLOWED:
            raise pickle.UnpicklingError(f"{module}.{name} is not data")
        return super().find_class(module, name)


def _read_batch(path: Path) -> tuple[np.ndarray, list[int]]:
    """One python batch file -> data uint8 [n, 3072], labels (keys are bytes or str depending on the pickle)."""
    with open(path, "rb") as fh:
        batch = _BatchUnpickler(fh, encoding="latin1").load()
    get = lambda k: batch[k] if k in batch else batch[k.encode()]  # noqa: E731
    return np.asarray(get("data"), dtype=np.uint8), list(get("labels"))


def load_cifar10(folder: str | Path) -> tuple[torch.Tensor, torch.Tensor]:
    """CIFAR-10 training set from the python batches in ``folder`` (``cifar-10-batches-py``)
    -> x uint8 [N, 3, 32, 32], y int64 [N] (N = 50,000 for the real set). The test batch is not read."""
    folder = Path(folder)
    xs, ys = [], []
    for i in range(1, 6):
        try:
            data, labels = _read_batch(folder / f"data_batch_{i}")
        except (OSError, pickle.UnpicklingError, KeyError, EOFError, ValueError) as exc:
            raise ZooError(f"CIFAR-10 batch {folder / f'data_batch_{i}'} unreadable ({type(exc).__name__})") from None
        xs.append(data.reshape(-1, 3, 32, 32))
        ys.extend(labels)
    return torch.from_numpy(np.concatenate(xs)), torch.tensor(ys, dtype=torch.int64)


def synthetic_cifar10(n: int = 4096, seed: int = 0) -> tuple[torch.Tensor, torch.Tensor]:
    """Class templates + smooth and pixel noise + 20 % label noise -> x uint8 [n, 3, 32, 32], y int64 [n]."""
    g = torch.Generator().manual_seed(10_000 + seed)
    base = torch.randn(1, 3, 4, 4, generator=g)
    cls = torch.randn(10, 3, 4, 4, generator=g)
    templates = F.interpolate(base + 0.3 * cls, size=32, mode="bilinear", align_corners=False)  # [10, 3, 32, 32]
    y = torch.randint(0, 10, (n,), generator=g)
    smooth = F.interpolate(torch.randn(n, 3, 8, 8, generator=g), size=32, mode="bilinear", align_corners=False)
    img = templates[y] + 0.9 * smooth + 0.5 * torch.randn(n, 3, 32, 32, generator=g)
    x = (128 + 45 * img).clamp(0, 255).to(torch.uint8)
    flip = torch.rand(n, generator=g) < 0.20
    y = torch.where(flip, torch.randint(0, 10, (n,), generator=g), y)
    return x, y.to(torch.int64)
