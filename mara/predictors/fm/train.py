"""``train_predictor(settings) -> dict``: train the flow predictor with Lightning (DDP-capable), export a checkpoint.

``settings``: a ``PredictorTraining`` (mara/predictors/fit_settings.py) — the FM's fit settings, the bank (None: the
shipped one), the seed, the Lightning trainer's arguments (max_epochs, devices, accelerator, ...) and the output
folder, parsed once by the entry point. CLI: ``python -m mara.predictors.fm.train [config.yaml] key=value ...``
(keys ``bank.path``, ``seed``, ``predictor``, ``trainer``, ``paths.output_dir``, parsed by mara/predictors/train.py).
"""

from __future__ import annotations

import time
from pathlib import Path

import lightning as L
import torch
from lightning.pytorch.callbacks import EarlyStopping, ModelCheckpoint
from lightning.pytorch.loggers import TensorBoardLogger

from mara.core.progress_callback import ProgressCallback
from mara.core.runlog import log_hparams, setup_logging
from mara.core.safe_load import load_checkpoint
from mara.curves.bank import default_bank_path, load_bank
from mara.predictors.bands.conformal import conformal_offset
from mara.predictors.fit_settings import FlowFitSettings, PredictorTraining, trainer_from_config
from mara.predictors.fm.data import CurveDataModule
from mara.predictors.fm.module import FlowPredictorModule
from mara.predictors.fm.predictor import FlowPredictor, novelty_stats, save_checkpoint
from mara.predictors.prefix import observe, true_remaining


def train_predictor(settings: PredictorTraining) -> dict:
    """Train FM on the bank's fm_train split, early-stop on val/fm_loss, export ``<output_dir>/fm.ckpt``."""

    setup_logging()
    bank = load_bank(settings.bank_path or default_bank_path())
    return fit_flow(bank, settings.fit, settings.trainer, Path(settings.output_dir), seed=settings.seed)


def fit_flow(bank, fit: FlowFitSettings, trainer: dict | None, out: Path, seed: int = 0, families=None) -> dict:
    """Train the flow net on ``bank``'s fm_train curves of ``families`` (None: all), validating on their fm_val
    curves; calibrate the conformal band offset on those fm_val queries; export ``out/fm.ckpt``. ``trainer``: the
    Lightning Trainer's arguments."""

    tc = fit.train
    L.seed_everything(seed, workers=True)
    torch.set_num_threads(tc.num_threads)
    out = Path(out)
    dm = CurveDataModule(bank, seed=seed, families=families, **fit.data)
    net_kw = dict(fit.net)
    module = FlowPredictorModule(
        net_kw,
        lr=tc.lr,
        weight_decay=tc.weight_decay,
        stats=dm.stats,
        figure_every_n_epochs=tc.figure_every_n_epochs,
        obs_every=fit.obs_every,
    )
    monitor = tc.monitor
    ckpt_cb = ModelCheckpoint(
        dirpath=out / "checkpoints", monitor=monitor, mode="min", save_last=True, filename="fm-{epoch:03d}"
    )
    callbacks = [
        ckpt_cb,
        EarlyStopping(monitor=monitor, mode="min", patience=tc.patience),
        ProgressCallback("predictor (FM)"),
    ]
    logger = TensorBoardLogger(str(out), name="tensorboard", default_hp_metric=False)
    kw = trainer_from_config(trainer)
    max_epochs = kw.setdefault("max_epochs", tc.max_epochs)  # the shipped checkpoint: 50 epochs (~8 min on 1 core)
    kw.setdefault("gradient_clip_val", tc.gradient_clip_val)
    kw.setdefault("enable_model_summary", False)
    trainer = L.Trainer(
        callbacks=callbacks, logger=logger, default_root_dir=str(out), reload_dataloaders_every_n_epochs=1, **kw
    )
    t0 = time.time()
    trainer.fit(module, datamodule=dm)
    result = {
        "wall_s": time.time() - t0,
        "epochs": trainer.current_epoch,
        "best_ckpt": ckpt_cb.best_model_path,
        "best_score": float(ckpt_cb.best_model_score or float("nan")),
        "seen_families": seen_families(dm),
    }
    for key in ("val/fm_loss", "val/mae_fm", "val/mae_wls"):
        if key in trainer.callback_metrics:
            result[key] = float(trainer.callback_metrics[key])
    if trainer.is_global_zero:
        best = ckpt_cb.best_model_path
        if best:
            state = load_checkpoint(best, "FM training checkpoint")["state_dict"]
            module.load_state_dict(state)
        result.update(calibrate_band(module.net, fit, dm))
        novelty = {k: v.tolist() for k, v in compute_novelty(module.net, dm).items()}  # checkpoint only
        fm_path = save_checkpoint(
            module.net,
            net_kw,
            out / "fm.ckpt",
            extra={"bank": str(bank.path), "seed": seed, **result, "novelty": novelty},
        )
        result["fm_ckpt"] = str(fm_path)
        log_hparams(out / "tensorboard", {"predictor": fit.config, "seed": seed, "max_epochs": int(max_epochs)}, result)
    return result


def seen_families(dm) -> list[str]:
    """Every family whose curves reach training or validation: train/val rows, an epoch's (augmented) training
    examples, the validation examples and the validation MAE queries."""
    fam = dm.bank.family
    train_bank, ex = dm.train_examples_for_epoch(0)
    seen = (
        set(fam[dm.train_rows])
        | set(fam[dm.val_rows])
        | set(train_bank.family[ex.rows])
        | set(fam[dm.val_set.rows])
        | set(fam[dm.val_q[0]])
    )
    return sorted(str(f) for f in seen)


def compute_novelty(net, dm, n_train: int = 4096) -> dict:
    """Novelty reference for the fallback score: Gaussian fit of the context vectors of epoch-0 training
    examples, d² quantiles of the validation examples (training families only)."""

    _, ex = dm.train_examples_for_epoch(0)

    def ctx(e, n):
        n = min(n, len(e.n_obs))
        H = int(e.n_obs[:n].max())
        with torch.inference_mode():
            return (
                net.eval()
                .context_vector(
                    torch.from_numpy(e.x[:n, :H].astype("float32")),
                    torch.from_numpy(e.n_obs[:n]),
                    torch.from_numpy(e.static[:n].astype("float32")),
                )
                .double()
                .numpy()
            )

    return novelty_stats(ctx(ex, n_train), ctx(dm.val_set, len(dm.val_set.n_obs)))


def calibrate_band(net, fit: FlowFitSettings, dm) -> dict:
    """Split-conformal offset of the q10–q90 band on the validation queries (training families' fm_val only)."""

    pred = FlowPredictor(net, n_samples=fit.n_samples, n_steps=fit.n_steps, band_offset=0.0)
    rows, n_obs, eps = dm.val_q
    k = fit.obs_every
    S, Lh = observe(dm.bank, rows, n_obs, k)
    truth, cap = true_remaining(dm.bank, rows, n_obs, eps, k)
    q = pred.predict_quantiles(S, Lh, n_obs, eps, cap, dm.bank.batch_size[rows], dm.bank.lr[rows])
    cover = fit.coverage
    off = conformal_offset(q[:, 0], q[:, -1], truth, cover)
    return {"band_offset": off, "band_coverage_target": cover, "band_n_calibration": int(len(rows))}
