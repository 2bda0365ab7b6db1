"""Zoo configurations (conf/zoo/<Family>.yaml) -> LightningModule + LightningDataModule of one training run.

A config names its model either as a built-in net (``model: {name: ...}`` + ``loss:``, trained by ``ZooTask``) or
as any LightningModule (``module: {_target_: pkg.Class, ...}``, built with ``lr=``), and its data either as a
built-in data set (``dataset: cifar10 | imdb | yesno | montezuma``) or as any ``ZooDataModule`` subclass
(``datamodule: {_target_: pkg.Class, ...}``). See tasks_zoo/README.md, "Adding a family".
"""

from __future__ import annotations

import torch
import torch.nn as nn
from omegaconf import DictConfig, OmegaConf

from tasks_zoo import atari, audio, cifar, text, vision
from tasks_zoo.configs import ZOO_CONF_DIR, known_families, load_zoo_config  # noqa: F401  (re-exported)
from tasks_zoo.datamodules import (  # noqa: F401
    DATA_ORDERS,
    DATAMODULES,
    SOURCES,
    ZooDataModule,
    cached_dataset,
)
from tasks_zoo.errors import ZooError
from tasks_zoo.module import ImageInput, ZooTask


def data_order(cfg: DictConfig) -> str:
    """A zoo config's data order (default ``shuffled``); one-line ZooError if unknown."""
    order = cfg.get("data_order", "shuffled")
    if order not in DATA_ORDERS:
        raise ZooError(f"zoo family {cfg.family}: unknown data_order {order!r} (use one of: {', '.join(DATA_ORDERS)})")
    return order


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


def _target(cfg, key: str):
    """(class named by ``cfg[key]._target_``, its other keys as kwargs); one-line ZooError if it cannot be imported."""
    from hydra.utils import get_class

    spec = dict(OmegaConf.to_container(cfg[key], resolve=True))
    target = spec.pop("_target_", None)
    try:
        return get_class(target), spec
    except Exception as exc:  # hydra wraps ImportError / AttributeError
        raise ZooError(
            f"zoo family {cfg.family}: {key}._target_ {target!r} cannot be imported ({type(exc).__name__})"
        ) from None


def datamodule_class(cfg: DictConfig) -> tuple[type[ZooDataModule], dict]:
    """The config's DataModule class and its extra constructor kwargs."""
    if "datamodule" in cfg:
        return _target(cfg, "datamodule")
    if cfg.get("dataset") not in DATAMODULES:
        raise ZooError(f"unknown zoo dataset {cfg.get('dataset')!r}")
    return DATAMODULES[cfg.dataset], {}


def load_dataset(dataset: str, source: str, data_root: str, cache_dir: str, download: bool = False):
    """(built-in dataset name, source) -> torch Dataset of (input, target); cached per process. Real data sets are
    found under ``data_root`` as unpacked folders or archives (unpacked once into ``cache_dir``; see
    tasks_zoo.archives)."""
    if source not in SOURCES:
        raise ZooError(f"unknown data source {source!r} (use one of: {', '.join(SOURCES)})")
    if dataset not in DATAMODULES:
        raise ZooError(f"unknown zoo dataset {dataset!r}")
    return cached_dataset(DATAMODULES[dataset], source, str(data_root), str(cache_dir), bool(download))


def build_datamodule(
    family: str,
    *,
    seed: int,
    batch_size: int,
    source: str = "synthetic",
    data_root: str = "data_cache",
    cache_dir: str = "data_cache",
    download: bool = False,
) -> ZooDataModule:
    """One run's DataModule (not yet prepared): the family's data set, batch size, seed and data order."""
    cfg = load_zoo_config(family)
    order = data_order(cfg)
    cls, kw = datamodule_class(cfg)
    return cls(
        seed=seed,
        batch_size=batch_size,
        data_order=order,
        source=source,
        data_root=str(data_root),
        cache_dir=str(cache_dir),
        download=bool(download),
        **kw,
    )


def build_module(family: str, lr: float):
    """The family's LightningModule for learning rate ``lr`` (initialised from the global torch seed)."""
    cfg = load_zoo_config(family)
    if "module" in cfg:
        cls, kw = _target(cfg, "module")
        return cls(lr=lr, **kw)
    return ZooTask(build_net(cfg.model), cfg.loss, lr)


def build_run(
    family: str,
    *,
    seed: int,
    batch_size: int,
    lr: float,
    source: str = "synthetic",
    data_root: str = "data_cache",
    cache_dir: str = "data_cache",
    download: bool = False,
):
    """One training run: (LightningModule, prepared LightningDataModule). The data set is loaded first and the seed
    then fixes the initialisation; the same seed fixes the data order (``trainer.fit(module, datamodule=dm)``)."""
    dm = build_datamodule(
        family,
        seed=seed,
        batch_size=batch_size,
        source=source,
        data_root=data_root,
        cache_dir=cache_dir,
        download=download,
    )
    dm.prepare_data()
    dm.setup("fit")
    torch.manual_seed(seed)
    return build_module(family, lr), dm


def build_task(
    family: str,
    *,
    seed: int,
    batch_size: int,
    lr: float,
    source: str = "synthetic",
    data_root: str = "data_cache",
    cache_dir: str = "data_cache",
    download: bool = False,
):
    """One training run's LightningModule and its seeded full-batch loader (seed fixes init and data order)."""
    module, dm = build_run(
        family,
        seed=seed,
        batch_size=batch_size,
        lr=lr,
        source=source,
        data_root=data_root,
        cache_dir=cache_dir,
        download=download,
    )
    return module, dm.train_dataloader()
