"""Typed settings of a predictor's training (the FM, the decision head), parsed once from its config.

``FlowFitSettings.from_config`` / ``HeadFitSettings.from_config`` read a plain predictor config (conf/predictor/fm.yaml,
qr.yaml: ``net``, ``data``, ``train``, ``inference``, ``band``) — the one reading of it; ``fit_flow`` and
``fit_quantile_head`` take only these objects. ``PredictorTraining`` adds what the pipeline's predictor stage sets
around it (the kind and its registered trainer, bank, seed, Lightning trainer arguments, output folder).
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any, Mapping


@dataclass(frozen=True)
class FitSettings:
    """``predictor.train``: AdamW, early stopping on ``monitor``, epochs (when the trainer sets none), threads."""

    lr: float
    weight_decay: float
    patience: int
    max_epochs: int = 50
    monitor: str = "val/fm_loss"
    gradient_clip_val: float = 1.0
    num_threads: int = 1
    figure_every_n_epochs: int = 5

    @classmethod
    def from_config(cls, tc: Mapping, monitor: str = "val/fm_loss") -> "FitSettings":
        return cls(
            lr=tc["lr"],
            weight_decay=tc["weight_decay"],
            patience=int(tc["patience"]),
            max_epochs=int(tc.get("max_epochs", 50)),
            monitor=tc.get("monitor", monitor),
            gradient_clip_val=tc.get("gradient_clip_val", 1.0),
            num_threads=int(tc.get("num_threads", 1)),
            figure_every_n_epochs=tc.get("figure_every_n_epochs", 5),
        )


@dataclass(frozen=True)
class FlowFitSettings:
    """The flow predictor's training: network and data-module arguments as configured, the fit, the sampler used to
    calibrate the band (samples, Euler steps), the band's coverage target, and the whole config (recorded)."""

    net: dict
    data: dict
    train: FitSettings
    n_samples: int = 8
    n_steps: int = 4
    coverage: float = 0.8
    obs_every: int = 10
    config: dict = field(default_factory=dict)

    @classmethod
    def from_config(cls, pc: Mapping) -> "FlowFitSettings":
        """From a plain (resolved) predictor config."""
        inf, band = pc.get("inference") or {}, pc.get("band") or {}
        return cls(
            net=dict(pc["net"]),
            data=dict(pc["data"]),
            train=FitSettings.from_config(pc["train"]),
            n_samples=inf.get("n_samples", 8),
            n_steps=inf.get("n_steps", 4),
            coverage=float(band.get("coverage", 0.8)),
            obs_every=pc["data"].get("obs_every", 10),
            config=dict(pc),
        )


@dataclass(frozen=True)
class PriorPretrainSettings:
    """``predictor.pretrain``: pre-training of the decision head on ``prior_curves`` curves of the LC-PFN prior
    (mara/predictors/qr/prior_curves.py; 0: none) for at most ``epochs`` epochs of ``train_examples`` examples, early
    stopping on the fm_val pinball loss after ``patience`` epochs, before the usual training on fm_train."""

    prior_curves: int = 0
    epochs: int = 10
    train_examples: int = 32768
    patience: int = 4

    @classmethod
    def from_config(cls, pt: Mapping | None) -> "PriorPretrainSettings":
        pt = dict(pt or {})
        unknown = sorted(set(pt) - {"prior_curves", "epochs", "train_examples", "patience"})
        if unknown:
            raise ValueError(f"predictor.pretrain: unknown key(s) {', '.join(unknown)}")
        out = cls(**{k: int(v) for k, v in pt.items()})
        if min(out.prior_curves, out.epochs, out.train_examples, out.patience) < 0:
            raise ValueError(f"predictor.pretrain: every setting must be >= 0, got {pt}")
        return out

    @property
    def enabled(self) -> bool:
        return self.prior_curves > 0 and self.epochs > 0


@dataclass(frozen=True)
class HeadFitSettings:
    """The decision head's training: network arguments, examples per epoch / validation, batch size, observation
    period, the fit, and the optional pre-training on the LC-PFN prior's curves (off by default)."""

    net: dict
    train_examples: int
    val_examples: int
    batch_size: int
    obs_every: int
    train: FitSettings
    pretrain: PriorPretrainSettings = field(default_factory=PriorPretrainSettings)

    @classmethod
    def from_config(cls, pc: Mapping) -> "HeadFitSettings":
        dc = pc["data"]
        return cls(
            net=dict(pc["net"]),
            train_examples=dc["train_examples"],
            val_examples=dc["val_examples"],
            batch_size=dc["batch_size"],
            obs_every=dc["obs_every"],
            train=FitSettings.from_config(pc["train"], monitor="val/pinball"),
            pretrain=PriorPretrainSettings.from_config(pc.get("pretrain")),
        )


def trainer_from_config(trainer: Mapping | None) -> dict:
    """The Lightning Trainer's arguments as configured, with the defaults of a predictor's fit: CPU, one device, DDP
    (gloo on CPU) for several devices."""
    kw = dict(trainer or {})
    kw.setdefault("accelerator", "cpu")
    kw.setdefault("devices", 1)
    devices = kw["devices"]
    n = devices if isinstance(devices, int) else (len(devices) if isinstance(devices, (list, tuple)) else 1)
    if n > 1 and "strategy" not in kw:
        kw["strategy"] = "ddp"  # gloo on CPU
    return kw


@dataclass(frozen=True)
class PredictorTraining:
    """The predictor stage: the kind it trains (a conf/predictor kind with a ``registry.trainer``) and that trainer,
    the kind's fit settings (``registry.settings`` parsed from the run's predictor config: ``FlowFitSettings``,
    ``HeadFitSettings``; None for a kind whose trainer takes the run config), the predictor config itself (plain), the
    bank (None: the shipped one), the seed, the Lightning trainer's arguments (accelerator, devices, max_epochs, ...)
    and the folder its checkpoint (``<output_dir>/<kind>.ckpt``) goes to."""

    fit: FlowFitSettings | HeadFitSettings | None
    output_dir: str
    bank_path: str | None = None
    seed: int = 0
    trainer: dict[str, Any] = field(default_factory=dict)
    kind: str = "fm"
    trained_by: str = "mara.predictors.fm.train.train_predictor"
    config: dict = field(default_factory=dict)

    @classmethod
    def from_command_line(cls, plain: Mapping, fit_settings, kind: str) -> "PredictorTraining":
        """A standalone trainer's settings from its parsed command line (``plain``: ``predictor``, ``seed``,
        ``bank.path``, ``trainer``, ``paths.output_dir``): the predictor config read by ``fit_settings.from_config``."""
        return cls(
            fit=fit_settings.from_config(plain["predictor"]),
            output_dir=plain["paths"]["output_dir"],
            bank_path=plain["bank"]["path"],
            seed=int(plain["seed"]),
            trainer=plain["trainer"] or {},
            kind=kind,
            config=plain["predictor"],
        )
