"""The predictor stage's call of a kind's registered trainer (``registry.trainer`` of its conf/predictor YAML).

A kind that registers its fit ``settings`` (the FM, the decision head) has its trainer take the typed
``PredictorTraining`` parsed before any work; a kind that registers none (one living outside the package) has its
trainer take the run config it was written for: ``predictor``, ``bank.path``, ``seed``, ``trainer`` and
``paths.output_dir`` (the stage's folder), built here from the same typed settings.
"""

from __future__ import annotations

from omegaconf import OmegaConf

from mara.core.registry import import_object
from mara.predictors.fit_settings import PredictorTraining


def trainer_config(training: PredictorTraining):
    """The run config a trainer without registered settings reads (an OmegaConf config, as the entry point has it)."""
    return OmegaConf.create(
        {
            "predictor": training.config,
            "bank": {"path": training.bank_path},
            "seed": training.seed,
            "trainer": training.trainer,
            "paths": {"output_dir": training.output_dir},
        }
    )


def run_trainer(training: PredictorTraining) -> dict:
    """Train ``training.kind`` with its registered trainer; it writes ``<training.output_dir>/<kind>.ckpt``."""
    trainer = import_object(training.trained_by)
    return trainer(training if training.fit is not None else trainer_config(training))
