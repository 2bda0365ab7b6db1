"""One LightningDataModule per zoo data set: CIFAR-10, IMDB, YESNO and Montezuma's Revenge.

A DataModule holds one training run's data: ``prepare_data`` finds the real data under ``data_root`` (unpacking an
archive once into ``cache_dir``, or downloading it when allowed: ``tasks_zoo.archives``), ``setup`` loads the data
set (cached per process, so the runs of one worker share it) and ``train_dataloader`` is the run's resumable
``seeded_loader``: full mini-batches reshuffled every epoch from the run's seed, or the file order
(``data_order: file``). A new data set subclasses ``ZooDataModule`` and implements ``real_dataset`` and
``synthetic_dataset`` (see tasks_zoo/README.md, "Adding a family").
"""

from __future__ import annotations

import functools

import lightning as L
from torch.utils.data import Dataset

from tasks_zoo.batching import TensorPairs, seeded_loader
from tasks_zoo.errors import ZooError

SOURCES = ("real", "synthetic")
#: ``data_order`` of a zoo config: reshuffled every epoch (default, A.2 as written) or the data set's file order
DATA_ORDERS = ("shuffled", "file")


@functools.lru_cache(maxsize=4)
def cached_dataset(cls: type, source: str, data_root: str, cache_dir: str, download: bool) -> Dataset:
    """``cls``'s data set for ``source``, built once per process."""
    if source == "real":
        return cls.real_dataset(data_root, cache_dir, download)
    return cls.synthetic_dataset()


class ZooDataModule(L.LightningDataModule):
    """One run's data: ``source`` real (read from ``data_root``/``cache_dir``) or synthetic (offline stand-in)."""

    #: archive key in ``tasks_zoo.archives.SPECS`` (None: the data set needs no archive)
    archive: str | None = None

    def __init__(
        self,
        seed: int,
        batch_size: int,
        data_order: str = "shuffled",
        source: str = "synthetic",
        data_root: str = "data_cache",
        cache_dir: str = "data_cache",
        download: bool = False,
    ):
        super().__init__()
        if source not in SOURCES:
            raise ZooError(f"unknown data source {source!r} (use one of: {', '.join(SOURCES)})")
        if data_order not in DATA_ORDERS:
            raise ZooError(f"unknown data_order {data_order!r} (use one of: {', '.join(DATA_ORDERS)})")
        self.seed, self.batch_size, self.data_order, self.source = int(seed), int(batch_size), data_order, source
        self.data_root, self.cache_dir, self.download = str(data_root), str(cache_dir), bool(download)
        self.dataset: Dataset | None = None

    @classmethod
    def real_dataset(cls, data_root: str, cache_dir: str, download: bool) -> Dataset:
        raise NotImplementedError

    @classmethod
    def synthetic_dataset(cls) -> Dataset:
        raise NotImplementedError

    def prepare_data(self) -> None:
        if self.source == "real" and self.archive is not None:
            from tasks_zoo.archives import locate

            locate(self.archive, self.data_root, self.cache_dir, self.download)

    def setup(self, stage: str | None = None) -> None:
        if self.dataset is None:
            self.dataset = cached_dataset(type(self), self.source, self.data_root, self.cache_dir, self.download)

    def train_dataloader(self):
        self.setup("fit")
        return seeded_loader(self.dataset, self.batch_size, self.seed, shuffle=self.data_order == "shuffled")


class Cifar10DataModule(ZooDataModule):
    """CIFAR-10's 50,000 training images (uint8 [3, 32, 32]) and labels; synthetic: 4096 class-template images."""

    archive = "cifar10"

    @classmethod
    def real_dataset(cls, data_root, cache_dir, download):
        from tasks_zoo import archives, cifar

        return TensorPairs(*cifar.load_cifar10(archives.locate("cifar10", data_root, cache_dir, download)))

    @classmethod
    def synthetic_dataset(cls):
        from tasks_zoo import cifar

        return TensorPairs(*cifar.synthetic_cifar10())


class ImdbDataModule(ZooDataModule):
    """IMDB's 25,000 labelled training reviews (token ids, len 200, vocab 20k), in file order; synthetic: Zipf text."""

    archive = "imdb"

    @classmethod
    def real_dataset(cls, data_root, cache_dir, download):
        from tasks_zoo import archives, imdb

        return TensorPairs(*imdb.load_imdb(archives.locate("imdb", data_root, cache_dir, download)))

    @classmethod
    def synthetic_dataset(cls):
        from tasks_zoo import imdb

        return TensorPairs(*imdb.synthetic_imdb())


class YesnoDataModule(ZooDataModule):
    """YESNO's 60 recordings as log-mel frames [257, 40] with 8 yes/no word labels; synthetic: tone-pair words."""

    archive = "yesno"

    @classmethod
    def real_dataset(cls, data_root, cache_dir, download):
        from tasks_zoo import archives, yesno

        return TensorPairs(*yesno.load_yesno(archives.locate("yesno", data_root, cache_dir, download)))

    @classmethod
    def synthetic_dataset(cls):
        from tasks_zoo import yesno

        return TensorPairs(*yesno.synthetic_yesno())


class MontezumaDataModule(ZooDataModule):
    """Montezuma's Revenge (ale-py emulator): 4096 (4×84×84 frame stack, scripted-expert action) pairs, generated
    once and cached in ``cache_dir/montezuma``; synthetic: a block walking over a fixed room."""

    @classmethod
    def real_dataset(cls, data_root, cache_dir, download):
        from tasks_zoo import montezuma

        return montezuma.load_montezuma(cache_dir)

    @classmethod
    def synthetic_dataset(cls):
        from tasks_zoo import montezuma

        return montezuma.synthetic_montezuma()


#: ``dataset:`` of a zoo config -> its DataModule (a config may name any other with ``datamodule: {_target_: ...}``)
DATAMODULES: dict[str, type[ZooDataModule]] = {
    "cifar10": Cifar10DataModule,
    "imdb": ImdbDataModule,
    "yesno": YesnoDataModule,
    "montezuma": MontezumaDataModule,
}
