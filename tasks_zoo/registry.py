"""Zoo configurations (conf/zoo/<Family>.yaml) -> model + dataset; datasets cached per process."""
from __future__ import annotations

import functools
from pathlib import Path

import torch
import torch.nn as nn
from omegaconf import DictConfig, OmegaConf

from tasks_zoo import archives, atari, audio, cifar, imdb, montezuma, text, vision, yesno
from tasks_zoo.batching import TensorPairs, seeded_loader
from tasks_zoo.errors import ZooError
from tasks_zoo.module import ImageInput, ZooTask

ZOO_CONF_DIR = Path(__file__).resolve().parent.parent / "conf" / "zoo"
SOURCES = ("real", "synthetic")
#: ``data_order`` of a zoo config: reshuffled every epoch (default, A.2 as written) or the data set's file order
DATA_ORDERS = ("shuffled", "file")


def data_order(cfg: DictConfig) -> str:
    """A zoo config's data order (default ``shuffled``); one-line ZooError if unknown."""
    order = cfg.get("data_order", "shuffled")
    if order not in DATA_ORDERS:
        raise ZooError(f"zoo family {cfg.family}: unknown data_order {order!r} (use one of: {', '.join(DATA_ORDERS)})")
    return order


def known_families() -> list[str]:
    """Families that have a configuration file."""
    return sorted(p.stem for p in ZOO_CONF_DIR.glob("*.yaml"))


def load_zoo_config(family: str) -> DictConfig:
    """The Hydra/OmegaConf config of one zoo family; one-line ZooError if unknown."""
    path = ZOO_CONF_DIR / f"{family}.yaml"
    if not path.exists():
        raise ZooError(f"unknown zoo family {family!r} (known: {', '.join(known_families())})")
    return OmegaConf.load(path)


def build_net(model_cfg) -> nn.Module:
    """Model config {name, ...kwargs} -> network including its input preparation."""
    kw = dict(OmegaConf.to_container(model_cfg, resolve=True)) if isinstance(model_cfg, DictConfig) else dict(model_cfg)
    name = kw.pop("name")
    if name == "small_cnn":
        return nn.Sequential(ImageInput(cifar.MEAN, cifar.STD), vision.SmallCNN(**kw))
    if name == "resnet":
        return nn.Sequential(ImageInput(cifar.MEAN, cifar.STD), vision.resnet_cifar(**kw))
    if name == "row_lstm":
        return nn.Sequential(ImageInput(cifar.MEAN, cifar.STD), vision.RowLSTM(**kw))
    if name == "simple_vit":
        return nn.Sequential(ImageInput(cifar.MEAN, cifar.STD), vision.SimpleViT(**kw))
    if name == "audio_transformer":
        return audio.AudioTransformer(**kw)
    if name == "attention_lstm":
        return text.AttentionLSTM(**kw)
    if name == "dagger_cnn":
        return nn.Sequential(ImageInput(), atari.DAggerCNN(**kw))
    raise ZooError(f"unknown zoo model {name!r}")


@functools.lru_cache(maxsize=4)
def load_dataset(dataset: str, source: str, data_root: str, cache_dir: str, download: bool = False):
    """(dataset name, source) -> torch Dataset of (input, target); cached per process. Real data sets are found
    under ``data_root`` as unpacked folders or archives (unpacked once into ``cache_dir``; see tasks_zoo.archives)."""
    if source not in SOURCES:
        raise ZooError(f"unknown data source {source!r} (use one of: {', '.join(SOURCES)})")
    real = {"cifar10": cifar.load_cifar10, "yesno": yesno.load_yesno, "imdb": imdb.load_imdb}
    synthetic = {"cifar10": cifar.synthetic_cifar10, "yesno": yesno.synthetic_yesno, "imdb": imdb.synthetic_imdb}
    if dataset in real:
        if source == "real":
            x, y = real[dataset](archives.locate(dataset, data_root, cache_dir, download))
        else:
            x, y = synthetic[dataset]()
        return TensorPairs(x, y)
    if dataset == "montezuma":
        return montezuma.load_montezuma(cache_dir) if source == "real" else montezuma.synthetic_montezuma()
    raise ZooError(f"unknown zoo dataset {dataset!r}")


def build_task(family: str, *, seed: int, batch_size: int, lr: float, source: str = "synthetic",
               data_root: str = "data_cache", cache_dir: str = "data_cache", download: bool = False):
    """One training run's LightningModule and its seeded full-batch loader (seed fixes init and data order)."""
    cfg = load_zoo_config(family)
    order = data_order(cfg)
    dataset = load_dataset(cfg.dataset, source, str(data_root), str(cache_dir), bool(download))
    torch.manual_seed(seed)
    module = ZooTask(build_net(cfg.model), cfg.loss, lr)
    return module, seeded_loader(dataset, batch_size, seed, shuffle=order == "shuffled")
