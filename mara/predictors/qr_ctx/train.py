"""Training of the in-context decision head (mara/predictors/qr_ctx/head.py): the decision head's recipe with the
family-context features, an ensemble of ``context.members`` seeds in one file.

Examples as the decision head's (fm_train curves, ε and budget drawn as the workload draws them, resampled every
epoch); each example's context is the other fm_train curves of its family (its own curve left out, as a task of the
workload is never among the reference curves), dropped for a ``context.drop`` share of the examples so the head
answers a family without reference curves too. Early stopping on the pinball loss of a fixed fm_val draw (context:
fm_train). Exports ``<out>/qr_ctx.ckpt``.
CLI: ``python -m mara.predictors.context_train [paths.output_dir=DIR] [seed=S] [predictor.context.members=N] ...``
(composes conf/predictor/qr_ctx.yaml under ``predictor``).
"""

from __future__ import annotations

import time
from dataclasses import dataclass
from pathlib import Path
from typing import Mapping

import lightning as L
import numpy as np
import torch
from torch.utils.data import DataLoader, TensorDataset

from mara.core.config import ConfigError
from mara.core.safe_load import load_checkpoint
from mara.curves.bank import default_bank_path, load_bank
from mara.predictors.fit_settings import HeadFitSettings, PredictorTraining
from mara.predictors.prefix import observe
from mara.predictors.qr.data import decision_examples
from mara.predictors.qr.train import QuantileHeadModule, head_trainer
from mara.predictors.qr_ctx.family import N_CONTEXT, FamilyContext
from mara.predictors.qr_ctx.head import KIND, N_STATIC_CTX, context_inputs, save_context_head


@dataclass(frozen=True)
class ContextFitSettings:
    """The decision head's fit settings and the context's: nearest curves ``k``, dropped share, ensemble members."""

    head: HeadFitSettings
    k: int = 8
    drop: float = 0.15
    members: int = 1

    @classmethod
    def from_config(cls, pc: Mapping) -> "ContextFitSettings":
        cc = pc.get("context") or {}
        k, drop, members = cc.get("k", 8), cc.get("drop", 0.15), cc.get("members", 1)
        if isinstance(k, bool) or not isinstance(k, int) or k < 1:
            raise ConfigError(f"predictor.context.k must be an integer >= 1, got {k!r}")
        if isinstance(members, bool) or not isinstance(members, int) or members < 1:
            raise ConfigError(f"predictor.context.members must be an integer >= 1, got {members!r}")
        if not isinstance(drop, (int, float)) or not 0 < float(drop) < 1:
            raise ConfigError(f"predictor.context.drop must be in (0, 1) (the head must see both), got {drop!r}")
        return cls(head=HeadFitSettings.from_config(pc), k=int(k), drop=float(drop), members=int(members))


def context_examples(
    bank, ctx: FamilyContext, rows, n: int, rng: np.random.Generator, obs_every: int, drop: float, leave_out: bool
):
    """(x [E, H, 4], n_obs [E], static [E, N_STATIC_CTX], y [E]): decision examples with their family context, the
    context zeroed ("no context") for a ``drop`` share; ``leave_out``: a curve is not in its own context."""
    ex = decision_examples(bank, rows, n, rng, bank.family_params or {}, obs_every)
    S, Lh = observe(bank, ex.rows, ex.n_obs, obs_every)
    x, st = context_inputs(
        ctx,
        S,
        Lh,
        ex.n_obs,
        ex.eps,
        ex.cap_left,
        bank.batch_size[ex.rows],
        bank.lr[ex.rows],
        bank.family[ex.rows],
        ex.rows if leave_out else None,
    )
    st[rng.random(len(st)) < drop, -N_CONTEXT:] = 0.0
    return x, ex.n_obs, st, ex.y


def _tensors(x, n, st, y):
    return TensorDataset(
        torch.from_numpy(x.astype(np.float32)),
        torch.from_numpy(n.astype(np.int64)),
        torch.from_numpy(st.astype(np.float32)),
        torch.from_numpy(y.astype(np.float32)),
    )


def _collate(items):
    x, n, st, y = (torch.stack(t) for t in zip(*items))
    return x[:, : int(n.max())], n, st, y


class ContextDataModule(L.LightningDataModule):
    """fm_train examples with context, resampled per epoch; a fixed fm_val draw; stats from a fixed training draw."""

    def __init__(self, bank, ctx: FamilyContext, fit: ContextFitSettings, seed: int = 0):
        super().__init__()
        self.bank, self.ctx, self.fit, self.seed = bank, ctx, fit, int(seed)
        self.train_rows = np.flatnonzero(bank.split == "fm_train")
        val_rows = np.flatnonzero(bank.split == "fm_val")
        if len(self.train_rows) == 0 or len(val_rows) == 0:
            raise ValueError(f"curve bank {bank.path}: needs fm_train and fm_val curves for the in-context head")
        h = fit.head
        self.val_set = context_examples(
            bank,
            ctx,
            val_rows,
            h.val_examples,
            np.random.default_rng([self.seed, 1]),
            h.obs_every,
            fit.drop,
            leave_out=False,
        )
        x, n, st, y = self._draw(np.random.default_rng([self.seed, 0]))
        valid = np.arange(x.shape[1])[None, :] < n[:, None]
        self.stats = {
            "hist": (x[valid].mean(0), x[valid].std(0)),
            "static": (st.mean(0), st.std(0)),
            "target": (y.mean(keepdims=True), y.std(keepdims=True)),
        }

    def _draw(self, rng):
        h = self.fit.head
        return context_examples(
            self.bank, self.ctx, self.train_rows, h.train_examples, rng, h.obs_every, self.fit.drop, leave_out=True
        )

    def train_dataloader(self):
        epoch = self.trainer.current_epoch if self.trainer is not None else 0
        ds = _tensors(*self._draw(np.random.default_rng([self.seed, 100, epoch])))
        return DataLoader(
            ds,
            batch_size=self.fit.head.batch_size,
            shuffle=True,
            collate_fn=_collate,
            generator=torch.Generator().manual_seed(self.seed + epoch),
        )

    def val_dataloader(self):
        return DataLoader(_tensors(*self.val_set), batch_size=2048, shuffle=False, collate_fn=_collate)


def fit_member(bank, ctx: FamilyContext, fit: ContextFitSettings, out: Path, seed: int):
    """One member: train, early-stop on the fm_val pinball loss, return (net, record)."""
    tc = fit.head.train
    L.seed_everything(seed, workers=True)
    torch.set_num_threads(tc.num_threads)
    dm = ContextDataModule(bank, ctx, fit, seed=seed)
    net_kw = {**dict(fit.head.net), "n_static": N_STATIC_CTX}
    module = QuantileHeadModule(net_kw, lr=tc.lr, weight_decay=tc.weight_decay, stats=dm.stats)
    trainer, ckpt_cb = head_trainer(tc, out, out / f"checkpoints_seed{seed}", "qr_ctx-{epoch:03d}")
    t0, c0 = time.time(), time.process_time()
    trainer.fit(module, datamodule=dm)
    best = load_checkpoint(ckpt_cb.best_model_path, "in-context head training checkpoint")["state_dict"]
    module.load_state_dict(best)
    rec = {
        "seed": seed,
        "wall_s": time.time() - t0,
        "cpu_s": time.process_time() - c0,
        "epochs": trainer.current_epoch,
        "best_val_pinball": float(ckpt_cb.best_model_score),
    }
    return module.net, net_kw, rec


def fit_context_head(bank, fit: ContextFitSettings, out, seed: int = 0) -> dict:
    """``fit.members`` members (seeds seed, seed + 1, ...) on ``bank``'s fm_train curves → ``out/qr_ctx.ckpt``."""
    out = Path(out)
    ctx = FamilyContext.from_banks([(bank, "fm_train")], k=fit.k)
    nets, records = [], []
    for m in range(fit.members):
        net, net_kw, rec = fit_member(bank, ctx, fit, out, seed + m)
        nets.append(net)
        records.append(rec)
        print(rec, flush=True)
    result = {
        "members": records,
        "wall_s": sum(r["wall_s"] for r in records),
        "cpu_s": sum(r["cpu_s"] for r in records),
        "bank": Path(str(bank.path)).name,  # the name only: a shipped file holds no machine path
        "seed": seed,
        "k": fit.k,
        "drop": fit.drop,
    }
    result["ckpt"] = str(save_context_head(nets, net_kw, out / f"{KIND}.ckpt", extra=result))
    return result


def train_context_head(settings: PredictorTraining) -> dict:
    """``mara.train``'s predictor stage for the in-context head (``registry.trainer`` of conf/predictor/qr_ctx.yaml):
    trained on the run's bank, exported to ``<settings.output_dir>/qr_ctx.ckpt``."""
    bank = load_bank(settings.bank_path or default_bank_path())
    return fit_context_head(bank, settings.fit, settings.output_dir, seed=settings.seed)
