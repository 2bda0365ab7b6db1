"""FlowPredictorModule: trains the flow net with Eq. 8 and monitors remaining-batch MAE against WLS.

Batch shapes: ``x [B, H, 4]``, ``lengths [B]``, ``static [B, 4]``, ``y [B, K]`` (+ fixed ``z0 [B, K]``, ``u [B]`` in validation).
"""
from __future__ import annotations

import lightning as L
import numpy as np
import torch

from mara.predictors.flow import fm_loss
from mara.predictors.fm import FlowPredictor
from mara.predictors.nets import FlowNet
from mara.predictors.wls import WLSPredictor


class FlowPredictorModule(L.LightningModule):
    def __init__(self, net: dict, lr: float = 1e-3, weight_decay: float = 1e-5, stats: dict | None = None,
                 val_n_samples: int = 8, val_n_steps: int = 4, figure_every_n_epochs: int = 5, obs_every: int = 10):
        super().__init__()
        self.save_hyperparameters(ignore=["stats"])
        self.net = FlowNet(**net)
        if stats is not None:
            self.net.hist_norm.set(*stats["hist"])
            self.net.static_norm.set(*stats["static"])
            self.net.target_norm.set(*stats["target"])
        self._wls_mae = None

    def _loss(self, batch, z0=None, u=None):
        ctx = self.net.encode(batch["x"], batch["lengths"], batch["static"])
        z1 = self.net.target_norm(batch["y"])
        z0 = torch.randn_like(z1) if z0 is None else z0
        u = torch.rand(z1.shape[0], device=z1.device) if u is None else u
        return fm_loss(self.net.velocity, z1, ctx, z0, u)

    def training_step(self, batch, batch_idx):
        loss = self._loss(batch)
        self.log("train/fm_loss", loss, prog_bar=True, on_step=True, on_epoch=True, batch_size=batch["y"].shape[0])
        return loss

    def validation_step(self, batch, batch_idx):
        loss = self._loss(batch, batch["z0"], batch["u"])
        self.log("val/fm_loss", loss, prog_bar=True, on_epoch=True, sync_dist=True, batch_size=batch["y"].shape[0])

    def predictor(self, n_samples=None, n_steps=None) -> FlowPredictor:
        return FlowPredictor(self.net, n_samples or self.hparams.val_n_samples, n_steps or self.hparams.val_n_steps)

    def on_validation_epoch_end(self):
        dm = getattr(self.trainer, "datamodule", None)
        if dm is None or self.trainer.sanity_checking:
            return
        from mara.predictors.data import remaining_mae

        k = self.hparams.obs_every
        was_training = self.net.training
        mae_fm = remaining_mae(self.predictor(), dm.bank, dm.val_q, k)
        self.net.train(was_training)
        if self._wls_mae is None:
            self._wls_mae = remaining_mae(WLSPredictor(), dm.bank, dm.val_q, k)
        # every rank computes the same deterministic numbers: no sync needed
        self.log("val/mae_fm", mae_fm, prog_bar=True)
        self.log("val/mae_wls", self._wls_mae)
        self.log("val/mae_fm_over_wls", mae_fm / max(self._wls_mae, 1e-9))
        every = self.hparams.figure_every_n_epochs
        if self.global_rank == 0 and every and self.current_epoch % every == 0 and self.logger is not None:
            self._log_figure(dm)

    def _log_figure(self, dm):
        import matplotlib

        matplotlib.use("Agg")
        import matplotlib.pyplot as plt

        from mara.predictors.data import observe

        bank, k = dm.bank, self.hparams.obs_every
        rows = dm.val_rows[:: max(1, len(dm.val_rows) // 4)][:4]
        n_obs = np.full(len(rows), 10)
        S, Lh = observe(bank, rows, n_obs, k)
        cap = bank.lengths[rows] - n_obs * k
        was_training = self.net.training
        edges, L_hat = self.predictor(16, 4).sample_futures(S, Lh, n_obs, cap, bank.batch_size[rows], bank.lr[rows], 16, 4)
        self.net.train(was_training)
        fig, axes = plt.subplots(1, len(rows), figsize=(4 * len(rows), 3))
        for ax, i, r in zip(np.atleast_1d(axes), range(len(rows)), rows):
            bs = bank.batch_size[r]
            ax.plot(np.arange(1, bank.lengths[r] + 1), bank.L[r, : bank.lengths[r]], "k-", lw=1, label="truth")
            ax.plot(S[i] / bs, Lh[i], "bo", ms=2, label="prefix")
            ax.plot(edges[i] / bs, L_hat[i].T, "r-", alpha=0.3, lw=0.8)
            ax.set_title(bank.family[r], fontsize=8)
        fig.tight_layout()
        self.logger.experiment.add_figure("val/sampled_futures", fig, global_step=self.global_step)
        plt.close(fig)

    def configure_optimizers(self):
        opt = torch.optim.AdamW(self.parameters(), lr=self.hparams.lr, weight_decay=self.hparams.weight_decay)
        max_epochs = max(1, int(self.trainer.max_epochs or 1)) if self.trainer is not None else 1
        sched = torch.optim.lr_scheduler.CosineAnnealingLR(opt, T_max=max_epochs, eta_min=self.hparams.lr * 0.05)
        return {"optimizer": opt, "lr_scheduler": {"scheduler": sched, "interval": "epoch"}}
