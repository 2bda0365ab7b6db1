"""``python -m mara.train``: the staged MARA pipeline (paper Algorithm 1) on the configured bank.

The composed config is parsed once, before any work, into typed settings (mara/train_settings.py); the stages read
only those. Stages (``stage=all`` runs them in order):
  ``predictor`` — train the run's predictor with its kind's trainer (``registry.trainer`` of its conf/predictor
                  YAML) when its kind says ``pipeline: true`` (the FM) or ``predictor_stage=train`` (any kind with
                  a trainer); skipped for ``predictor_stage=skip``, a given ``predictor.ckpt_path`` or a kind with
                  nothing to train (``wls``) → ``<run>/predictor/<kind>.ckpt``;
  ``policy``    — train the MAT allocator with PPO against the frozen predictor → ``<run>/policy/``;
  ``evaluate``  — evaluate the trained policy next to every baseline on identical episodes.
"""

from __future__ import annotations

import json
from dataclasses import replace
from pathlib import Path

import hydra
from omegaconf import DictConfig, OmegaConf

from mara.core import registry
from mara.core.cli import check_group_overrides, exit_on_error, made_run_dir, run_cli
from mara.core.config import ConfigError
from mara.core.registry import import_object
from mara.core.rundir import holding, run_settled_stage
from mara.core.runlog import log
from mara.evaluate import all_methods_failed, run_evaluation
from mara.mat.trace_train import run_trace_policy
from mara.mat.train import check_policy_files, checkpoint_method, train_policy, with_run_policy
from mara.pipelines.paper import run_paper
from mara.predictors.fit_settings import PredictorTraining
from mara.preflight import preflight
from mara.train_settings import (
    RunSettings,
    TrainSettings,
    check_stage_and_reward,
    parse,
    run_evaluation_settings,
    with_run_folder,
)


def before_any_work(cfg: DictConfig) -> TrainSettings:
    """The one check before any work: the stage and reward names, the shared pre-flight (method names and overrides,
    numbers, checkpoints, folders), then the config parsed into typed settings (every setting the stages read
    checked; MARA's trace policy, ``experiment=trace_mara``: its block and the traces it reads) and the policy's
    checkpoints. A mistake is one ``ConfigError`` line (exit 2)."""
    check_stage_and_reward(cfg)
    preflight(cfg, "train")
    settings = parse(cfg)
    if settings.accelerator in ("gpu", "cuda"):
        import torch

        if not torch.cuda.is_available():
            raise ConfigError(
                f"trainer.accelerator={settings.accelerator} (trainer=gpu) but torch sees no CUDA GPU; use trainer=cpu"
            )
    if settings.policy is not None and settings.runs("policy"):
        check_policy_files(settings.policy)
    return settings


def train(cfg: DictConfig) -> dict:
    """The configured stages of ``cfg``, parsed and checked once before any work; a dict of what each produced."""
    return run_training(before_any_work(cfg))


def run_training(settings: TrainSettings) -> dict:
    """The run its settings describe, in its folder (one live run per folder; a rerun resumes)."""
    folder = None if settings.folder is None else Path(settings.folder)
    with holding(folder, settings.fresh, dict(settings.records)):  # the stages' records (none: the trace policy)
        out = made_run_dir(settings.folder, settings.task_name)
        if settings.trace_policy is not None:  # MARA's trace policy: its own resumable stages (mara/mat/trace_train.py)
            return run_trace_policy(settings.trace_policy, out, log=log.info)
        if settings.paper is not None:  # the paper's protocol: its own resumable job graph (mara/pipelines/paper.py)
            return run_paper(settings.paper, out)
        return run_stages(with_run_folder(settings, out))


def run_stages(run: RunSettings) -> dict:
    """The recipe: predictor stage → policy stage → evaluation, each when the run's stage asks for it."""
    settings, out = run.settings, Path(run.folder)
    result: dict = {"output_dir": str(out)}
    if settings.runs("predictor"):
        run, trained = predictor_stage(run)
        if trained is not None:
            result["predictor"] = trained
    if settings.runs("policy"):
        result["policy"] = policy_stage(run)
    if settings.runs("evaluate"):
        policy_ckpt = (result.get("policy") or {}).get("best_ckpt") or run.policy_ckpt
        result.update(evaluation_stage(run, policy_ckpt))
    (out / "train_result.json").write_text(json.dumps(result, indent=1, default=str))
    return result


def predictor_stage(run: RunSettings) -> tuple[RunSettings, dict | None]:
    """Train the run's predictor with its kind's registered trainer (``settings.predictor``: None when the kind has
    nothing to train here); later stages read the checkpoint it wrote, ``<run>/predictor/<kind>.ckpt``."""
    fit = run.settings.predictor
    if fit is None:
        log.info(
            f"predictor stage: nothing to train for predictor {run.settings.predictor_name!r} (its checkpoint is "
            "read as it is; the stage trains a predictor whose registry says pipeline: true; "
            "predictor_stage=train trains any predictor with a trainer)"
        )
        return run, None
    folder = Path(run.folder) / "predictor"
    fit = replace(fit, output_dir=str(folder))
    result = run_settled_stage(folder, lambda _: run_trainer(fit), run.settings.record("predictor"), "predictor")
    ckpt = folder / f"{fit.kind}.ckpt"
    return (run.with_predictor_ckpt(fit.kind, str(ckpt)) if ckpt.exists() else run), result


def run_trainer(training: PredictorTraining) -> dict:
    """Train ``training.kind`` with its registered trainer (``registry.trainer``); it writes
    ``<training.output_dir>/<kind>.ckpt``. A kind that registers its fit ``settings`` takes the typed
    ``PredictorTraining``; one that registers none (a kind living outside the package) takes the run config it was
    written for — ``predictor``, ``bank.path``, ``seed``, ``trainer``, ``paths.output_dir`` — built from the same
    settings."""
    trainer = import_object(training.trained_by)
    if training.fit is not None:
        return trainer(training)
    return trainer(
        OmegaConf.create(
            {
                "predictor": training.config,
                "bank": {"path": training.bank_path},
                "seed": training.seed,
                "trainer": training.trainer,
                "paths": {"output_dir": training.output_dir},
            }
        )
    )


def policy_stage(run: RunSettings) -> dict:
    """Train the MAT policy on the run's predictor; an earlier attempt's ``last.ckpt`` resumes."""
    policy = run.policy
    if policy is None:
        raise ConfigError("the policy stage needs a MAT recipe (mat=...)")
    folder = Path(run.folder) / "policy"
    policy = replace(policy, output_dir=str(folder))
    return run_settled_stage(
        folder,
        lambda resume: train_policy(policy if resume is None else policy.resumed(resume)),
        run.settings.record("policy"),
        "policy",
        resume_file="checkpoints/last.ckpt",
        resume_given=bool(policy.ckpt_path),
    )


def evaluation_stage(run: RunSettings, policy_ckpt: str | None) -> dict:
    """Every listed method on identical episodes, this run's policy (``policy_ckpt``) in place of the learned
    method it was trained as, on the predictor it was trained with."""
    trained = checkpoint_method(policy_ckpt) if policy_ckpt else None  # the policy this run evaluates
    methods, overrides = evaluated_methods(run, trained, policy_ckpt)
    folder = made_run_dir(str(Path(run.folder) / "evaluation"), "evaluation")
    with holding(folder):
        res = run_evaluation(run_evaluation_settings(run, methods, overrides), folder)
    out = {"evaluation": {k: v for k, v in res.items() if k in ("summary", "paths", "timings")}}
    if all_methods_failed(res):
        out["error"] = all_methods_failed(res)
    return out


def evaluated_methods(run: RunSettings, trained: str | None, policy_ckpt: str | None) -> tuple[list[str], dict]:
    """(methods, method overrides) of the evaluation: a learned method runs this run's policy, or the checkpoints its
    override gives; without either it is skipped with a note."""
    overrides = {m: dict(v) for m, v in run.method_overrides.items()}
    listed = with_run_policy(list(run.settings.methods), trained) if trained else list(run.settings.methods)
    methods = []
    for m in listed:
        if registry.method(m).learned:
            if not policy_ckpt and not overrides.get(m, {}).get("checkpoints"):
                log.warning(f"skipping {m} in the evaluation (no trained policy checkpoint)")
                continue
            if policy_ckpt and m == trained:
                own = {"train_seed": run.settings.seed, "ckpt_path": str(policy_ckpt)}
                overrides.setdefault(m, {})["checkpoints"] = [own]
                overrides[m]["predictor"] = run.predictor_key  # the policy runs on the predictor it was trained with
            elif not overrides.get(m, {}).get("checkpoints"):
                log.warning(f"skipping {m} (this run's policy is {trained})")
                continue
        methods.append(m)
    return methods, overrides


@hydra.main(version_base="1.3", config_path="../conf", config_name="train")
def _hydra_main(cfg: DictConfig) -> None:
    result = run_cli(train, cfg)
    exit_on_error(result.get("error") if isinstance(result, dict) else None)


def main() -> None:
    """The command line: config-group choices are checked first (one line, exit 2), then Hydra composes."""

    check_group_overrides(config_name="train", check=before_any_work)  # a multirun: every job checked first
    _hydra_main()


if __name__ == "__main__":
    main()
