"""Two job types outside the task zoo, for ``python -m mara.live jobs=examples/jobs.yaml``.

- ``MLPClassifier`` + ``BlobData``: an MLP on a synthetic 10-class problem generated here (Gaussian class
  clusters in 64 dimensions with label noise: scikit-learn's digits are 8x8 = 64 features, 10 classes), with a
  held-out validation split on which ``validation_step`` logs ``val/acc`` and ``val/loss`` (metric targets).
- ``TinyCNN`` + ``Cifar10Subset``: a small CNN on the first ``n`` images of CIFAR-10, read from the data folder
  (the python batches, unpacked or as the archive; ``source: synthetic`` uses the zoo's stand-in images instead).
"""

from __future__ import annotations

import lightning as L
import torch
import torch.nn.functional as F
from torch import nn
from torch.utils.data import DataLoader, TensorDataset


class MLPClassifier(L.LightningModule):
    """Two hidden layers, cross-entropy, Adam; validation logs accuracy and loss."""

    def __init__(self, in_dim: int = 64, hidden: int = 64, classes: int = 10, lr: float = 1e-3):
        super().__init__()
        self.net = nn.Sequential(
            nn.Linear(in_dim, hidden), nn.ReLU(), nn.Linear(hidden, hidden), nn.ReLU(), nn.Linear(hidden, classes)
        )
        self.lr = lr

    def training_step(self, batch, batch_idx):
        x, y = batch
        loss = F.cross_entropy(self.net(x), y)
        self.log("train/loss", loss)
        return {"loss": loss}

    def validation_step(self, batch, batch_idx):
        x, y = batch
        logits = self.net(x)
        self.log("val/loss", F.cross_entropy(logits, y))
        self.log("val/acc", (logits.argmax(dim=1) == y).float().mean())

    def configure_optimizers(self):
        return torch.optim.Adam(self.parameters(), lr=self.lr)


class BlobData(L.LightningDataModule):
    """``n`` training and ``n_val`` validation points of ``classes`` Gaussian clusters in ``dim`` dimensions, ``noise``
    of the labels flipped (seeded; the validation points are drawn after the training points, so ``n_val`` does not
    change the training set)."""

    def __init__(
        self,
        n: int = 2000,
        dim: int = 64,
        classes: int = 10,
        noise: float = 0.1,
        batch_size: int = 32,
        seed: int = 0,
        n_val: int = 500,
    ):
        super().__init__()
        self.n, self.dim, self.classes, self.noise, self.batch_size, self.seed = (
            n,
            dim,
            classes,
            noise,
            batch_size,
            seed,
        )
        self.n_val = n_val

    def setup(self, stage=None):
        g = torch.Generator().manual_seed(self.seed)
        centers = 1.5 * torch.randn(self.classes, self.dim, generator=g)

        def draw(n):
            y = torch.randint(0, self.classes, (n,), generator=g)
            x = centers[y] + torch.randn(n, self.dim, generator=g)
            flip = torch.rand(n, generator=g) < self.noise
            return TensorDataset(x, torch.where(flip, torch.randint(0, self.classes, (n,), generator=g), y))

        self.train_set = draw(self.n)
        self.val_set = draw(self.n_val)

    def train_dataloader(self):
        return DataLoader(self.train_set, batch_size=self.batch_size, shuffle=True)

    def val_dataloader(self):
        return DataLoader(self.val_set, batch_size=256)


class TinyCNN(L.LightningModule):
    """Two conv layers and a linear head on uint8 images [B, 3, 32, 32]."""

    def __init__(self, width: int = 16, lr: float = 1e-3):
        super().__init__()
        self.net = nn.Sequential(
            nn.Conv2d(3, width, 3, padding=1),
            nn.ReLU(),
            nn.MaxPool2d(2),
            nn.Conv2d(width, 2 * width, 3, padding=1),
            nn.ReLU(),
            nn.MaxPool2d(2),
            nn.Flatten(),
            nn.Linear(2 * width * 8 * 8, 10),
        )
        self.lr = lr

    def training_step(self, batch, batch_idx):
        x, y = batch
        return F.cross_entropy(self.net(x.float() / 255.0 - 0.5), y)

    def configure_optimizers(self):
        return torch.optim.Adam(self.parameters(), lr=self.lr)


class Cifar10Subset(L.LightningDataModule):
    """The first ``n`` CIFAR-10 training images from ``data_root`` (the zoo's reader and archive handling)."""

    def __init__(
        self,
        n: int = 5000,
        batch_size: int = 32,
        data_root: str = "data_cache",
        cache_dir: str = "data_cache",
        source: str = "real",
    ):
        super().__init__()
        self.n, self.batch_size, self.data_root, self.cache_dir, self.source = (
            n,
            batch_size,
            data_root,
            cache_dir,
            source,
        )

    def setup(self, stage=None):
        from tasks_zoo.registry import load_dataset

        ds = load_dataset("cifar10", self.source, self.data_root, self.cache_dir, False)
        n = min(self.n, len(ds))
        x, y = zip(*(ds[i] for i in range(n)))
        self.train_set = TensorDataset(torch.stack(x), torch.stack([torch.as_tensor(v) for v in y]))

    def train_dataloader(self):
        return DataLoader(self.train_set, batch_size=self.batch_size, shuffle=True)
