"""CIFAR-10 data: the real python batches (torchvision) or a learnable synthetic stand-in, as uint8 [N, 3, 32, 32]."""
from __future__ import annotations

import pickle
from pathlib import Path

import numpy as np
import torch
import torch.nn.functional as F

from tasks_zoo.errors import ZooError

MEAN = (0.4914, 0.4822, 0.4465)
STD = (0.2470, 0.2435, 0.2616)


def _cifar10_class():
    """torchvision's CIFAR10 reader, checking that the batch files exist rather than their md5 (slow, per worker)."""
    from torchvision.datasets import CIFAR10

    class PresentCIFAR10(CIFAR10):
        def _check_integrity(self) -> bool:
            folder = Path(self.root) / self.base_folder
            return all((folder / name).is_file() for name, _ in self.train_list + self.test_list)

        def _load_meta(self) -> None:
            with open(Path(self.root) / self.base_folder / self.meta["filename"], "rb") as fh:
                self.classes = pickle.load(fh, encoding="latin1")[self.meta["key"]]
            self.class_to_idx = {c: i for i, c in enumerate(self.classes)}

    return PresentCIFAR10


def load_cifar10(root: str | Path, download: bool = False) -> tuple[torch.Tensor, torch.Tensor]:
    """Real CIFAR-10 training set from ``root/cifar-10-batches-py`` -> x uint8 [50000, 3, 32, 32], y int64 [50000]."""
    root = Path(root)
    try:
        ds = _cifar10_class()(str(root), train=True, download=download)
    except Exception as exc:  # torchvision raises RuntimeError / URLError / OSError
        raise ZooError(
            f"CIFAR-10 not found or unreadable under {root / 'cifar-10-batches-py'} ({exc.__class__.__name__}); put the python "
            f"batches there, set zoo.download=true where the network allows, or use source=synthetic"
        ) from None
    x = torch.from_numpy(np.ascontiguousarray(ds.data.transpose(0, 3, 1, 2)))
    return x, torch.as_tensor(ds.targets, dtype=torch.int64)


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
