"""``python -m mara.train``: the staged MARA pipeline (paper Algorithm 1) on the configured bank.

Stages (``stage=all`` runs them in order):
  ``predictor`` — train the run's predictor with its kind's trainer (``registry.trainer`` of its conf/predictor
                  YAML) when its kind says ``pipeline: true`` (the FM) or ``predictor_stage=train`` (any kind with
                  a trainer); skipped for ``predictor_stage=skip``, a given ``predictor.ckpt_path`` or a kind with
                  nothing to train (``wls``) → ``<run>/predictor/<kind>.ckpt``;
  ``policy``    — train the MAT allocator with PPO against the frozen predictor → ``<run>/policy/``;
  ``evaluate``  — evaluate the trained policy next to every baseline on identical episodes.
"""
from __future__ import annotations

import importlib.util
import json
from pathlib import Path

import hydra
from hydra.core.hydra_config import HydraConfig
from omegaconf import DictConfig, OmegaConf, open_dict

from mara.core import registry
from mara.core.cli import check_group_overrides, output_dir, run_cli
from mara.core.config import ConfigError, load_method_cfg
from mara.core.rundir import run_folder, run_stage
from mara.core.runlog import log
from mara.eval.settings import check_number, node_options, protocol_settings
from mara.evaluate import all_methods_failed, evaluate
from mara.mat.train import (
    check_teacher_predictor,
    checkpoint_method,
    resolve_config,
    train_policy,
    with_run_policy,
)
from mara.pipelines.paper import run_paper
from mara.preflight import preflight

STAGES = ("all", "predictor", "policy", "evaluate")
PREDICTOR_STAGE = ("auto", "train", "skip")  # what the predictor stage does with the run's predictor


def _available(module: str) -> bool:
    try:
        return importlib.util.find_spec(module) is not None
    except ModuleNotFoundError:
        return False


def _stage_cfg(cfg: DictConfig, out: Path) -> DictConfig:
    c = cfg.copy()
    with open_dict(c):
        c.paths.output_dir = str(out)
    return c


def _before_any_work(cfg: DictConfig) -> None:
    """The stage and reward names, then the shared check of every setting, checkpoint and folder."""
    if cfg.get("stage", "all") not in STAGES:
        raise ConfigError(f"stage must be one of {', '.join(STAGES)}, got {cfg.get('stage')!r}")
    if cfg.get("predictor_stage", "auto") not in PREDICTOR_STAGE:
        raise ConfigError(f"predictor_stage must be one of {', '.join(PREDICTOR_STAGE)}, got {cfg.predictor_stage!r}")
    if cfg.get("reward", "dense") not in ("dense", "sparse"):
        raise ConfigError(f"reward must be 'dense' or 'sparse', got {cfg.reward!r}")
    preflight(cfg, "train")


@run_folder(stages=("predictor", "policy"), check=_before_any_work)  # one live run per folder; a rerun resumes
def train(cfg: DictConfig) -> dict:
    """Run the configured stages; returns a dict of what each stage produced."""
    stage = cfg.get("stage", "all")
    check_run_config(cfg)
    accelerator = str((cfg.get("trainer") or {}).get("accelerator", "cpu"))
    if accelerator in ("gpu", "cuda"):
        import torch

        if not torch.cuda.is_available():
            raise ConfigError(f"trainer.accelerator={accelerator} (trainer=gpu) but torch sees no CUDA GPU; use trainer=cpu")
    out = output_dir(cfg)
    if cfg.get("experiment_kind") == "paper":

        return run_paper(cfg, out)
    result: dict = {"output_dir": str(out)}
    run = lambda s: stage in ("all", s)  # noqa: E731
    pred_name = cfg.predictor.get("name", "fm")
    if stage in ("policy", "evaluate"):
        _use_run_folder_checkpoints(cfg, out, stage)

    kind = registry.predictor_entry(str(pred_name), missing_ok=True)
    mode = cfg.get("predictor_stage", "auto")  # auto: the kind's pipeline flag; train: any kind with a trainer
    trains = kind is not None and kind.trainer and (mode == "train" or (mode == "auto" and kind.pipeline))
    if run("predictor") and trains and not (stage == "all" and cfg.predictor.get("ckpt_path")):
        # the kind's own trainer (registry.trainer in its conf/predictor YAML) writes <run>/predictor/<kind>.ckpt
        trainer = registry.import_object(kind.trainer)
        result["predictor"] = run_stage(out / "predictor", trainer, _stage_cfg(cfg, out / "predictor"), "predictor")
        ckpt = out / "predictor" / f"{kind.name}.ckpt"
        if ckpt.exists():
            _use_predictor_checkpoint(cfg, kind.name, ckpt, run_predictor=True)
    elif run("predictor"):  # the decision head does not read the FM: nothing to train first
        log.info(f"predictor stage: nothing to train for predictor {pred_name!r} (its checkpoint is read as it is; "
                 "the stage trains a predictor whose registry says pipeline: true; predictor_stage=train trains any "
                 "predictor with a trainer)")

    if run("policy"):
        if not _available("mara.mat.train"):
            raise ConfigError("the policy stage needs mara.mat (MAT-PPO), which this checkout does not have")

        result["policy"] = run_stage(out / "policy", train_policy, _stage_cfg(cfg, out / "policy"), "policy",
                                     resume_file="checkpoints/last.ckpt")

    if run("evaluate"):

        methods = []
        overrides = OmegaConf.to_container(cfg.method_overrides, resolve=True) if cfg.get("method_overrides") else {}
        policy_ckpt = (result.get("policy") or {}).get("best_ckpt") or cfg.get("policy_ckpt")
        listed = list(cfg.methods)
        trained = checkpoint_method(policy_ckpt) if policy_ckpt else None  # the policy this run evaluates
        if trained:
            listed = with_run_policy(listed, trained)
        for m in listed:
            if registry.method(m).learned:
                if not policy_ckpt and not overrides.get(m, {}).get("checkpoints"):
                    log.warning(f"skipping {m} in the evaluation (no trained policy checkpoint)")
                    continue
                if policy_ckpt and m == trained:
                    overrides.setdefault(m, {})["checkpoints"] = [{"train_seed": int(cfg.seed), "ckpt_path": str(policy_ckpt)}]
                    overrides[m]["predictor"] = run_predictor_key(cfg)  # the policy runs on the predictor it was trained with
                elif not overrides.get(m, {}).get("checkpoints"):
                    log.warning(f"skipping {m} (this run's policy is {trained})")
                    continue
            methods.append(m)
        ecfg = _stage_cfg(cfg, out / "evaluation")
        with open_dict(ecfg):
            ecfg.methods = methods
            ecfg.method_overrides = overrides

        res = evaluate(ecfg)
        result["evaluation"] = {k: v for k, v in res.items() if k in ("summary", "paths", "timings")}
        if all_methods_failed(res):
            result["error"] = all_methods_failed(res)
    (out / "train_result.json").write_text(json.dumps(result, indent=1, default=str))
    return result


def check_run_config(cfg: DictConfig) -> None:
    """Every setting the later stages read, checked before any work starts (one-line ConfigError)."""
    check_number("seed", cfg.get("seed", 0), int)
    protocol_settings(cfg)  # sim.* and eval.*
    node_options(cfg.sim)  # node speeds / switch costs reach the policy stage (mat=hetero: v3 node features)
    for m in cfg.get("methods") or []:
        load_method_cfg(m)
    if cfg.get("mat") is not None and cfg.get("stage", "all") in ("all", "policy"):
        check_teacher_predictor(resolve_config(cfg))  # mat=default needs predictor=qr_q: refused before the predictor stage


def _use_predictor_checkpoint(cfg: DictConfig, kind: str, ckpt: Path, run_predictor: bool) -> None:
    """Point the run's predictors of ``kind`` (``predictors.<key>`` with that ``name``) at ``ckpt``, and the run's
    training predictor too when ``run_predictor`` and it is of that kind (then it is ``predictors.<kind>`` as well
    where the run lists none of that name: the methods that name the kind read this run's checkpoint)."""
    with open_dict(cfg):
        if run_predictor and cfg.predictor.get("name") == kind:
            cfg.predictor.ckpt_path = str(ckpt)
            if "predictors" not in cfg:
                cfg.predictors = {}
            if kind not in cfg.predictors:
                cfg.predictors[kind] = cfg.predictor.copy()
        for spec in (cfg.get("predictors") or {}).values():
            if spec is not None and spec.get("name") == kind:
                spec.ckpt_path = str(ckpt)


def _use_run_folder_checkpoints(cfg: DictConfig, out: Path, stage: str) -> None:
    """A later stage in an existing run folder uses that run's products: ``<run>/predictor/<kind>.ckpt`` (unless a
    predictor checkpoint is given) and, for ``stage=evaluate``, ``<run>/policy/checkpoints/best.ckpt`` (unless
    ``policy_ckpt`` is given)."""
    if not cfg.predictor.get("ckpt_path"):
        for kind in registry.predictor_kinds():
            trained = out / "predictor" / f"{kind}.ckpt"
            if trained.exists():
                _use_predictor_checkpoint(cfg, kind, trained, run_predictor=True)
                log.info(f"using this run's predictor {trained}")
    best = out / "policy" / "checkpoints" / "best.ckpt"
    if stage == "evaluate" and not cfg.get("policy_ckpt") and best.exists():
        with open_dict(cfg):
            cfg.policy_ckpt = str(best)
        log.info(f"using this run's policy {best}")


def run_predictor_key(cfg: DictConfig) -> str | None:
    """The ``predictors.<key>`` entry that is this run's training predictor, so the evaluation builds the policy's
    predictor from the same config (``predictor=qr`` → ``qr``, not MARA-QR's default ``qr_q``). The run's predictor
    config is copied into that entry (it may carry this run's FM checkpoint or command-line overrides)."""
    pred = cfg.get("predictor")
    if pred is None or pred.get("name") is None:
        return None
    key = None
    try:
        key = HydraConfig.get().runtime.choices.get("predictor")
    except ValueError:  # called outside a Hydra run (tests, library use)
        pass
    preds = cfg.get("predictors") or {}
    if key is None:
        same = [k for k, v in preds.items() if v is not None and v.get("name") == pred.name and v.get("band") == pred.get("band")]
        key = same[0] if same else str(pred.name)
    with open_dict(cfg):
        if "predictors" not in cfg:
            cfg.predictors = {}
        cfg.predictors[key] = pred.copy()
    return key


@hydra.main(version_base="1.3", config_path="../conf", config_name="train")
def _hydra_main(cfg: DictConfig) -> None:
    import sys

    result = run_cli(train, cfg)
    if isinstance(result, dict) and result.get("error"):
        print(f"error: {result['error']}", file=sys.stderr)
        sys.exit(1)


def main() -> None:
    """The command line: config-group choices are checked first (one line, exit 2), then Hydra composes."""

    check_group_overrides(config_name="train")
    _hydra_main()


if __name__ == "__main__":
    main()
