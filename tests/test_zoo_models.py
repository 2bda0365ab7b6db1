"""Every zoo family builds from its Hydra config and trains 3 batches on synthetic data with finite losses."""

from __future__ import annotations

import math

import lightning as L
import pytest
import torch

from mara.curves.families import ALL_FAMILIES
from mara.curves.recorder import LossRecorder
from tasks_zoo.errors import ZooError
from tasks_zoo.registry import build_task, known_families, load_zoo_config
from tasks_zoo.vision import SimpleViT, resnet_cifar


def _train(family: str, steps: int = 3, batch_size: int = 2, seed: int = 0) -> list[float]:
    module, loader = build_task(family, seed=seed, batch_size=batch_size, lr=1e-3, source="synthetic")
    rec = LossRecorder()
    trainer = L.Trainer(
        accelerator="cpu",
        devices=1,
        max_steps=steps,
        max_epochs=-1,
        logger=False,
        enable_checkpointing=False,
        enable_progress_bar=False,
        enable_model_summary=False,
        callbacks=[rec],
        use_distributed_sampler=False,
        num_sanity_val_steps=0,
        limit_val_batches=0,
    )
    trainer.fit(module, train_dataloaders=loader)
    return rec.losses


def test_every_paper_family_has_a_config():
    assert sorted(ALL_FAMILIES) == known_families()
    for fam in ALL_FAMILIES:
        assert load_zoo_config(fam).family == fam


@pytest.mark.parametrize("family", ALL_FAMILIES)
def test_family_trains_three_batches(family):
    torch.set_num_threads(1)
    losses = _train(family)
    assert len(losses) == 3 and all(math.isfinite(v) and v >= 0 for v in losses)


def test_same_seed_same_curve():
    torch.set_num_threads(1)
    assert _train("TSFM_Audio_1", steps=4, seed=3) == _train("TSFM_Audio_1", steps=4, seed=3)
    assert _train("TSFM_Audio_1", steps=4, seed=3) != _train("TSFM_Audio_1", steps=4, seed=4)


def test_architecture_shapes():
    net = resnet_cifar(18)
    assert net.conv1.kernel_size == (7, 7) and net(torch.randn(2, 3, 32, 32)).shape == (2, 10)
    net = resnet_cifar(34, stem="cifar")
    assert net.conv1.kernel_size == (3, 3) and isinstance(net.maxpool, torch.nn.Identity)
    with pytest.raises(ValueError, match="stem"):
        resnet_cifar(18, stem="big")
    assert SimpleViT(patch=4, dim=32, depth=1, heads=2, mlp=32)(torch.randn(2, 3, 32, 32)).shape == (2, 10)


def test_unknown_family_is_one_clear_line():
    with pytest.raises(ZooError, match="unknown zoo family 'Nope'"):
        load_zoo_config("Nope")
