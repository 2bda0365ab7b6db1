"""Training of the decision head: ``QuantileHeadModule`` (Lightning) and ``fit_quantile_head``.

Pinball loss at the head's levels on log(1 + remaining batches); fm_train curves (examples resampled every epoch,
seed + epoch), early stopping on the pinball loss of a fixed fm_val draw. Exports ``<out>/qr.ckpt``.
Optionally (``predictor.pretrain.prior_curves=N``, off by default) the head is first trained on N curves of the
LC-PFN prior (mara/predictors/qr/prior_curves.py; same examples, inputs and standardisation, same fm_val early stopping)
and then trained as usual from those weights.
CLI: ``python -m mara.predictors.quantile_train [paths.output_dir=DIR] [seed=S] [predictor.train.max_epochs=N] ...``
(composes conf/predictor/qr.yaml under ``predictor``).
"""

from __future__ import annotations

import time
from dataclasses import replace
from pathlib import Path

import lightning as L
import numpy as np
import torch
from lightning.pytorch.callbacks import EarlyStopping, ModelCheckpoint
from torch.utils.data import DataLoader, TensorDataset

from mara.core.safe_load import load_checkpoint, plain_lightning_checkpoint
from mara.curves.bank import default_bank_path, load_bank
from mara.predictors.fit_settings import HeadFitSettings, PredictorTraining
from mara.predictors.qr.data import decision_examples
from mara.predictors.qr.head import QuantileNet, save_head
from mara.predictors.qr.levels import pinball_loss
from mara.predictors.qr.prior_curves import prior_bank


def _tensors(ex):
    return TensorDataset(
        torch.from_numpy(ex.x.astype(np.float32)),
        torch.from_numpy(ex.n_obs.astype(np.int64)),
        torch.from_numpy(ex.static.astype(np.float32)),
        torch.from_numpy(ex.y.astype(np.float32)),
    )


def _collate(items):
    x, n, st, y = (torch.stack(t) for t in zip(*items))
    return x[:, : int(n.max())], n, st, y


class DecisionDataModule(L.LightningDataModule):
    """fm_train examples resampled per epoch; a fixed fm_val draw; standardisation stats from a fixed training draw.
    ``train_bank``: the bank whose fm_train curves give the training examples (default ``bank``; the LC-PFN prior's
    curves when pre-training) — validation and standardisation always come from ``bank``."""

    def __init__(
        self,
        bank,
        seed: int = 0,
        train_examples: int = 16384,
        val_examples: int = 4096,
        batch_size: int = 256,
        obs_every: int = 10,
        train_bank=None,
    ):
        super().__init__()
        self.bank, self.seed, self.obs_every = bank, int(seed), int(obs_every)
        self.train_bank = bank if train_bank is None else train_bank
        self.n_train, self.batch_size = int(train_examples), int(batch_size)
        fp = bank.family_params or {}
        self.fp = fp
        self.train_rows = np.flatnonzero(bank.split == "fm_train")
        self.val_rows = np.flatnonzero(bank.split == "fm_val")
        if len(self.train_rows) == 0 or len(self.val_rows) == 0:
            raise ValueError(f"curve bank {bank.path}: needs fm_train and fm_val curves for the decision head")
        self.val_set = decision_examples(
            bank, self.val_rows, int(val_examples), np.random.default_rng([self.seed, 1]), fp, obs_every
        )
        ref = decision_examples(
            bank, self.train_rows, self.n_train, np.random.default_rng([self.seed, 0]), fp, obs_every
        )
        valid = np.arange(ref.x.shape[1])[None, :] < ref.n_obs[:, None]
        self.stats = {
            "hist": (ref.x[valid].mean(0), ref.x[valid].std(0)),
            "static": (ref.static.mean(0), ref.static.std(0)),
            "target": (ref.y.mean(keepdims=True), ref.y.std(keepdims=True)),
        }

    def train_dataloader(self):
        epoch = self.trainer.current_epoch if self.trainer is not None else 0
        ex = decision_examples(
            self.train_bank,
            self.train_rows if self.train_bank is self.bank else np.flatnonzero(self.train_bank.split == "fm_train"),
            self.n_train,
            np.random.default_rng([self.seed, 100, epoch]),
            self.fp,
            self.obs_every,
        )
        return DataLoader(
            _tensors(ex),
            batch_size=self.batch_size,
            shuffle=True,
            collate_fn=_collate,
            generator=torch.Generator().manual_seed(self.seed + epoch),
        )

    def val_dataloader(self):
        return DataLoader(_tensors(self.val_set), batch_size=2048, shuffle=False, collate_fn=_collate)


class QuantileHeadModule(L.LightningModule):
    def __init__(self, net: dict, lr: float = 2e-3, weight_decay: float = 1e-5, stats: dict | None = None):
        super().__init__()
        self.save_hyperparameters(ignore=["stats"])
        self.net = QuantileNet(**net)
        if stats is not None:
            self.net.hist_norm.set(*stats["hist"])
            self.net.static_norm.set(*stats["static"])
            self.net.target_norm.set(*stats["target"])

    def _loss(self, batch):
        x, n, st, y = batch
        return pinball_loss(self.net(x, n, st), self.net.target_norm(y[:, None])[:, 0], self.net.levels)

    def training_step(self, batch, batch_idx):
        loss = self._loss(batch)
        self.log("train/pinball", loss, on_step=False, on_epoch=True, batch_size=batch[0].shape[0])
        return loss

    def validation_step(self, batch, batch_idx):
        self.log("val/pinball", self._loss(batch), prog_bar=True, on_epoch=True, batch_size=batch[0].shape[0])

    def on_save_checkpoint(self, checkpoint: dict) -> None:
        plain_lightning_checkpoint(checkpoint)  # loads with weights_only=True

    def configure_optimizers(self):
        opt = torch.optim.AdamW(self.parameters(), lr=self.hparams.lr, weight_decay=self.hparams.weight_decay)
        T = max(1, int(self.trainer.max_epochs or 1)) if self.trainer is not None else 1
        sched = torch.optim.lr_scheduler.CosineAnnealingLR(opt, T_max=T, eta_min=self.hparams.lr * 0.05)
        return {"optimizer": opt, "lr_scheduler": {"scheduler": sched, "interval": "epoch"}}


def head_trainer(tc, out: Path, ckpt_dir: Path, filename: str) -> tuple[L.Trainer, ModelCheckpoint]:
    """A quantile head's CPU trainer: early stopping on validation pinball loss, the best epoch kept in ``ckpt_dir``."""
    ckpt_cb = ModelCheckpoint(dirpath=ckpt_dir, monitor="val/pinball", mode="min", filename=filename)
    trainer = L.Trainer(
        max_epochs=tc.max_epochs,
        accelerator="cpu",
        devices=1,
        logger=False,
        callbacks=[ckpt_cb, EarlyStopping(monitor="val/pinball", mode="min", patience=tc.patience)],
        reload_dataloaders_every_n_epochs=1,
        enable_model_summary=False,
        enable_progress_bar=False,
        gradient_clip_val=float(tc.gradient_clip_val),
        default_root_dir=str(out),
    )
    return trainer, ckpt_cb


def _fit_best(module, dm, tc, out: Path, ckpt_dir: Path, filename: str) -> tuple[int, float]:
    """Fit ``module`` on ``dm`` with ``tc``, load its best epoch's weights back; (epochs run, best val pinball)."""
    trainer, ckpt_cb = head_trainer(tc, out, ckpt_dir, filename)
    trainer.fit(module, datamodule=dm)
    module.load_state_dict(load_checkpoint(ckpt_cb.best_model_path, "decision-head training checkpoint")["state_dict"])
    return trainer.current_epoch, float(ckpt_cb.best_model_score)


def _data_module(bank, fit: HeadFitSettings, seed: int, train_examples: int, train_bank=None) -> DecisionDataModule:
    """The head's examples: ``train_examples`` from ``train_bank``'s fm_train curves (default ``bank``), fm_val's."""
    return DecisionDataModule(
        bank,
        seed=seed,
        train_examples=train_examples,
        val_examples=fit.val_examples,
        batch_size=fit.batch_size,
        obs_every=fit.obs_every,
        train_bank=train_bank,
    )


def _pretrain_on_prior(module, bank, fit: HeadFitSettings, out: Path, seed: int) -> dict:
    """Train ``module`` on the LC-PFN prior's curves (``fit.pretrain``), early-stopped on ``bank``'s fm_val."""
    pt = fit.pretrain
    prior = prior_bank(bank, pt.prior_curves, np.random.default_rng([seed, 7]))
    dm = _data_module(bank, fit, seed, pt.train_examples, train_bank=prior)
    tc = replace(fit.train, max_epochs=pt.epochs, patience=pt.patience)
    t0, c0 = time.time(), time.process_time()
    epochs, best = _fit_best(module, dm, tc, out, out / "checkpoints_prior", "prior-{epoch:03d}")
    return {
        "prior_curves": pt.prior_curves,
        "epochs": epochs,
        "best_val_pinball": best,
        "wall_s": time.time() - t0,
        "cpu_s": time.process_time() - c0,
    }


def fit_quantile_head(bank, fit: HeadFitSettings, out, seed: int = 0) -> dict:
    """Train on ``bank``'s fm_train curves (after the prior's curves if ``fit.pretrain`` is on), early-stop on fm_val
    pinball loss, export ``out/qr.ckpt``."""
    tc = fit.train
    L.seed_everything(seed, workers=True)
    torch.set_num_threads(tc.num_threads)
    out = Path(out)
    dm = _data_module(bank, fit, seed, fit.train_examples)
    net_kw = dict(fit.net)
    module = QuantileHeadModule(net_kw, lr=tc.lr, weight_decay=tc.weight_decay, stats=dm.stats)
    pretrain = _pretrain_on_prior(module, bank, fit, out, seed) if fit.pretrain.enabled else None
    t0, c0 = time.time(), time.process_time()
    epochs, best = _fit_best(module, dm, tc, out, out / "checkpoints", "qr-{epoch:03d}")
    result = {
        "wall_s": time.time() - t0,
        "epochs": epochs,
        "best_val_pinball": best,
        "bank": str(bank.path),
        "seed": seed,
    }
    if pretrain is not None:
        result.update(cpu_s=time.process_time() - c0, pretrain=pretrain)
    result["ckpt"] = str(save_head(module.net, net_kw, out / "qr.ckpt", extra=result))
    return result


def train_head(settings: PredictorTraining) -> dict:
    """``mara.train``'s predictor stage for the decision head (``registry.trainer`` of conf/predictor/qr.yaml):
    ``settings.fit`` (any variant of kind ``qr``, its ``net``/``data``/``train`` defaulting to qr.yaml's) trained on
    the run's bank, exported to ``<settings.output_dir>/qr.ckpt``."""
    bank = load_bank(settings.bank_path or default_bank_path())
    return fit_quantile_head(bank, settings.fit, settings.output_dir, seed=settings.seed)
