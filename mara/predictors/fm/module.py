"""FlowPredictorModule: trains the flow net with Eq. 8 and monitors remaining-batch MAE, budget accuracy and band
coverage against WLS (torchmetrics, reduced over DDP ranks: ``mara.predictors.fm.val_metrics``).

Batch shapes: ``x [B, H, 4]``, ``lengths [B]``, ``static [B, 4]``, ``y [B, K]`` (+ fixed ``z0 [B, K]``, ``u [B]`` in
validation).
"""

from __future__ import annotations

import lightning as L
import numpy as np
import torch

from mara.core.safe_load import plain_lightning_checkpoint
from mara.predictors.baselines.wls import WLSPredictor
from mara.predictors.fm.flow import fm_loss
from mara.predictors.fm.nets import FlowNet
from mara.predictors.fm.predictor import FlowPredictor
from mara.predictors.fm.val_metrics import (
    RemainingBatchMetrics,
    rank_share,
    validation_budgets,
)
from mara.predictors.prefix import observe, true_remaining


class FlowPredictorModule(L.LightningModule):
    def __init__(
        self,
        net: dict,
        lr: float = 1e-3,
        weight_decay: float = 1e-5,
        stats: dict | None = None,
        val_n_samples: int = 8,
        val_n_steps: int = 4,
        figure_every_n_epochs: int = 5,
        obs_every: int = 10,
    ):
        super().__init__()
        self.save_hyperparameters(ignore=["stats"])
        self.net = FlowNet(**net)
        if stats is not None:
            self.net.hist_norm.set(*stats["hist"])
            self.net.static_norm.set(*stats["static"])
            self.net.target_norm.set(*stats["target"])
        self._wls = None  # WLS's validation metrics (fixed: computed once)
        self._val_budget = None
        self.val_fm, self.val_wls = RemainingBatchMetrics(), RemainingBatchMetrics()

    def _loss(self, batch, z0=None, u=None):
        ctx = self.net.encode(batch["x"], batch["lengths"], batch["static"])
        z1 = self.net.target_norm(batch["y"])
        z0 = torch.randn_like(z1) if z0 is None else z0
        u = torch.rand(z1.shape[0], device=z1.device) if u is None else u
        return fm_loss(self.net.velocity, z1, ctx, z0, u)

    def on_save_checkpoint(self, checkpoint: dict) -> None:
        plain_lightning_checkpoint(checkpoint)  # loads with weights_only=True

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
        was_training = self.net.training
        fm = self._score(self.predictor(), dm, self.val_fm)
        self.net.train(was_training)
        if self._wls is None:
            self._wls = self._score(WLSPredictor(), dm, self.val_wls)
        # torchmetrics summed every rank's share of the queries: the values are the same on every rank
        self.log("val/mae_fm", fm["mae"], prog_bar=True)
        self.log("val/budget_acc_fm", fm["budget_acc"])
        self.log("val/coverage_fm", fm["coverage"])
        self.log("val/mae_wls", self._wls["mae"])
        self.log("val/budget_acc_wls", self._wls["budget_acc"])
        self.log("val/mae_fm_over_wls", fm["mae"] / max(self._wls["mae"], 1e-9))
        every = self.hparams.figure_every_n_epochs
        if self.global_rank == 0 and every and self.current_epoch % every == 0 and self.logger is not None:
            self._log_figure(dm)

    def _score(self, predictor, dm, metrics: RemainingBatchMetrics) -> dict:
        """Remaining-batch MAE, budget accuracy and band coverage of ``predictor`` on the validation queries; this
        rank scores its share, the metrics reduce over ranks."""

        rows, n_obs, eps = dm.val_q
        k, bank = self.hparams.obs_every, dm.bank
        if self._val_budget is None:
            self._val_budget = validation_budgets(bank, rows, n_obs, getattr(dm, "seed", 0), k)
        share = rank_share(len(rows), self.global_rank, self.trainer.world_size)
        r, n, e, budget = rows[share], n_obs[share], eps[share], self._val_budget[share]
        if len(r):
            S, Lh = observe(bank, r, n, k)
            truth, cap = true_remaining(bank, r, n, e, k)
            args = (S, Lh, n, e, cap, bank.batch_size[r], bank.lr[r])
            band = predictor.predict_quantiles(*args)
            pred = (
                band[:, int(np.argmin(np.abs(np.asarray(predictor.quantiles) - 0.5)))]
                if isinstance(predictor, FlowPredictor)
                else predictor.predict_remaining(*args)
            )
            metrics.update(pred, band[:, 0], band[:, -1], truth, n * k, budget, bank.first_crossing(r, e))
        out = metrics.compute()
        metrics.reset()
        return out

    def _log_figure(self, dm):
        import matplotlib

        matplotlib.use("Agg")
        import matplotlib.pyplot as plt

        bank, k = dm.bank, self.hparams.obs_every
        rows = dm.val_rows[:: max(1, len(dm.val_rows) // 4)][:4]
        n_obs = np.full(len(rows), 10)
        S, Lh = observe(bank, rows, n_obs, k)
        cap = bank.lengths[rows] - n_obs * k
        was_training = self.net.training
        edges, L_hat = self.predictor(16, 4).sample_futures(
            S, Lh, n_obs, cap, bank.batch_size[rows], bank.lr[rows], 16, 4
        )
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
