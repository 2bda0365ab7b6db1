"""The one reading of ``python -m mara.train``'s composed config: typed settings and the checks before any work.

``parse(cfg)`` turns the composed config (conf/train.yaml) into a frozen ``TrainSettings``: the stage, the predictor
stage's fit (``PredictorTraining``, mara/predictors/fit_settings.py: the run's predictor kind, its registered trainer
and fit settings, mara/core/registry.py), the policy stage's ``MatSettings``
(mara/mat/settings.py, the simulator's ``SimSettings`` shared with the evaluation) and the run-folder records of
each stage. Every mistake it finds is one ``ConfigError`` line (exit 2, before any work): stage and reward names,
seed, ``sim.*`` / ``eval.*``, node speeds, method names, the recipe's sections, suite settings, training roots
and the imitation teacher's predictor. ``experiment=trace_mara`` (``experiment_kind: trace_policy``) parses into
``TrainSettings.trace_policy`` instead (``TracePolicySettings``, mara/mat/trace_settings.py: its ``trace_mara`` block,
every window spec's trace read and checked). mara/mat, the predictors' training and mara/train.py read only these
objects.

The MAT recipe's reading is mara/recipe_settings.py (``mat_settings`` also reads a bare conf/mat recipe,
``load_recipe``, as the bench and the tests train from one); the ``trace_mara`` block's is mara/trace_mara_settings.py.
"""

from __future__ import annotations

from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Mapping

from hydra.core.hydra_config import HydraConfig
from omegaconf import DictConfig, OmegaConf, open_dict

from mara.core import registry
from mara.core.config import ConfigError, load_method_cfg, plain_config
from mara.core.rundir import STAGE_SETTINGS, folder_of, stage_settings
from mara.core.runlog import log
from mara.eval.settings import EvaluationSettings, check_number, evaluation_settings, node_options, protocol_settings
from mara.mat.settings import MatSettings
from mara.mat.trace_settings import TracePolicySettings
from mara.mat.train import policy_method
from mara.predictors.fit_settings import FlowFitSettings, PredictorTraining
from mara.recipe_settings import check_teacher_predictor, load_recipe, mat_settings, merged_recipe
from mara.trace_mara_settings import trace_policy_settings

#: the recipe's and the trace policy's readers are part of this entry's parse (mara.recipe_settings,
#: mara.trace_mara_settings), importable from here as well
__all__ = [
    "TrainSettings",
    "PaperSettings",
    "TrainedSpec",
    "RunSettings",
    "parse",
    "paper_settings",
    "predictor_training",
    "trained_method",
    "run_predictor_key",
    "with_run_folder",
    "run_evaluation_settings",
    "check_stage_and_reward",
    "mat_settings",
    "load_recipe",
    "merged_recipe",
    "check_teacher_predictor",
    "trace_policy_settings",
]

STAGES = ("all", "predictor", "policy", "evaluate")
#: what the predictor stage does with the run's predictor: ``auto`` trains a kind whose registry says
#: ``pipeline: true`` (the FM), ``train`` any kind with a registered trainer, ``skip`` none
PREDICTOR_STAGE = ("auto", "train", "skip")


@dataclass(frozen=True)
class TrainedSpec:
    """How the paper's protocol trains one learned method: its predictor, reward and MAT recipe (None: the composed
    one)."""

    predictor: str = "fm"
    reward: str = "dense"
    mat: str | None = None


@dataclass(frozen=True)
class PaperSettings:
    """``experiment=paper``'s protocol (its ``paper`` block, mara/pipelines/paper.py): the methods evaluated, how each
    learned one is trained, the training seeds, the worker processes (None: one per usable core), whether the FM is
    trained first, the stress scenario; ``composed``: the composed config as YAML (resolved, ``fresh`` false), from
    which each job's config is made (every job parses its own)."""

    methods: tuple[str, ...]
    trained: Mapping[str, TrainedSpec]
    seeds: tuple[int, ...]
    composed: str
    workers: int | None = None
    train_predictor: bool = True
    stress_scenario: str | None = None


@dataclass(frozen=True)
class TrainSettings:
    """What one ``python -m mara.train`` run does. ``predictor``: the predictor stage's training (None: nothing to
    train: the predictor's kind has no training here, or a checkpoint is given); ``policy``: the policy stage's
    training (None: no MAT recipe); ``evaluation``: the evaluation stage's settings before the run's policy and
    predictors join them (None: no evaluation stage); ``paper``: the paper's protocol instead of the stages;
    ``trace_policy``: MARA's trace policy training instead of the stages (``experiment=trace_mara``);
    ``records``: each stage's settings as its run folder records them; ``predictor_config``: the run's predictor
    config (plain); ``folder``: the run folder (None: a fresh one under outputs/``task_name``); ``fresh``: set the
    folder's earlier products aside first."""

    stage: str = "all"
    seed: int = 0
    reward: str = "dense"
    paper: PaperSettings | None = None
    trace_policy: TracePolicySettings | None = None
    folder: str | None = None
    task_name: str = "train"
    fresh: bool = False
    evaluation: EvaluationSettings | None = None
    accelerator: str = "cpu"
    predictor_config: dict | None = None
    predictor: PredictorTraining | None = None
    policy: MatSettings | None = None
    methods: tuple[str, ...] = ()
    method_overrides: dict = field(default_factory=dict)
    policy_ckpt: str | None = None
    predictor_key: str | None = None
    records: dict = field(default_factory=dict)

    def record(self, stage: str) -> dict:
        """``stage``'s settings as its run folder records them."""
        return self.records[stage]

    def runs(self, stage: str) -> bool:
        """Whether this run runs ``stage``."""
        return self.stage in ("all", stage)

    @property
    def predictor_name(self) -> str | None:
        return None if self.predictor_config is None else self.predictor_config.get("name")


def check_stage_and_reward(cfg: DictConfig) -> tuple[str, str]:
    """``(stage, reward)``, each one of its names, and ``predictor_stage`` one of its modes (one-line
    ``ConfigError`` otherwise)."""
    stage = cfg.get("stage", "all")
    if stage not in STAGES:
        raise ConfigError(f"stage must be one of {', '.join(STAGES)}, got {cfg.get('stage')!r}")
    if cfg.get("predictor_stage", "auto") not in PREDICTOR_STAGE:
        raise ConfigError(
            f"predictor_stage must be one of {', '.join(PREDICTOR_STAGE)}, got {cfg.get('predictor_stage')!r}"
        )
    reward = cfg.get("reward", "dense")
    if reward not in ("dense", "sparse"):
        raise ConfigError(f"reward must be 'dense' or 'sparse', got {cfg.reward!r}")
    return stage, reward


def parse(cfg: DictConfig) -> TrainSettings:
    """The typed settings of a composed ``train`` config, every setting checked (one-line ``ConfigError``)."""
    stage, reward = check_stage_and_reward(cfg)
    seed = check_number("seed", cfg.get("seed", 0), int)
    if cfg.get("experiment_kind") == "trace_policy":  # MARA's trace policy: its own block, none of the stages
        folder = folder_of(cfg)
        return TrainSettings(
            stage=stage,
            seed=seed,
            reward=reward,
            trace_policy=trace_policy_settings(cfg),
            folder=None if folder is None else str(folder),
            task_name=str(cfg.get("task_name", "train")),
            fresh=bool(cfg.get("fresh", False)),
        )
    protocol_settings(cfg)  # sim.* and eval.*
    node_options(cfg.sim)  # node speeds / switch costs reach the policy stage (mat=hetero: v3 node features)
    methods = tuple(cfg.get("methods") or ())
    evaluates = stage in ("all", "evaluate") and cfg.get("experiment_kind") != "paper"
    for m in methods:
        if m in registry.method_files() and registry.method(m).trace.only and evaluates:
            raise ConfigError(
                f"method {m!r} schedules job traces only: run it with python -m mara.evaluate "
                "experiment=trace (docs/traces.md)"
            )
    policy = None
    if cfg.get("mat") is not None:
        policy = mat_settings(cfg)
        if stage in ("all", "policy"):
            check_teacher_predictor(policy)  # mat=default needs predictor=qr_q: refused before the predictor stage
    pred = plain_config(cfg.get("predictor"))
    paper = paper_settings(cfg) if cfg.get("experiment_kind") == "paper" else None
    evaluation = evaluation_settings(cfg) if evaluates else None
    folder = folder_of(cfg)
    return TrainSettings(
        stage=stage,
        seed=seed,
        reward=reward,
        paper=paper,
        folder=None if folder is None else str(folder),
        task_name=str(cfg.get("task_name", "train")),
        fresh=bool(cfg.get("fresh", False)),
        evaluation=evaluation,
        accelerator=str((cfg.get("trainer") or {}).get("accelerator", "cpu")),
        predictor_config=pred,
        predictor=_predictor_training(cfg, pred, stage),
        policy=policy,
        methods=methods,
        method_overrides=plain_config(cfg.get("method_overrides")) or {},
        policy_ckpt=cfg.get("policy_ckpt"),
        predictor_key=run_predictor_key(cfg),
        records={name: stage_settings(cfg, name) for name in STAGE_SETTINGS},
    )


def paper_settings(cfg: DictConfig) -> PaperSettings:
    """The paper's protocol of a composed ``train`` config with ``experiment=paper`` (its ``paper`` block), every
    method name and the worker count checked (one ``ConfigError`` line)."""
    if "paper" not in cfg:
        raise ConfigError("experiment_kind=paper needs a 'paper' block (conf/experiment/paper.yaml)")
    block = cfg.paper
    trained = {}
    for method, spec in (plain_config(block.get("trained")) or {}).items():
        spec = spec or {}
        unknown = sorted(set(spec) - {"predictor", "reward", "mat"})
        if unknown:
            raise ConfigError(
                f"paper.trained.{method}: unknown setting{'s' if len(unknown) > 1 else ''} "
                f"{', '.join(unknown)} (predictor, reward, mat)"
            )
        trained[str(method)] = TrainedSpec(
            str(spec.get("predictor", "fm")),
            str(spec.get("reward", "dense")),
            None if spec.get("mat") is None else str(spec["mat"]),
        )
        if registry.predictor_file(trained[str(method)].predictor) is None:
            raise ConfigError(f"paper.trained.{method}.predictor: no predictor {trained[str(method)].predictor!r}")
        if spec.get("mat") is not None and registry.find_conf("mat", f"{spec['mat']}.yaml") is None:
            raise ConfigError(f"paper.trained.{method}.mat: no MAT recipe {spec['mat']!r} (conf/mat/)")
    methods = tuple(str(m) for m in block.methods)
    for m in methods:  # unknown names stop here, before any work
        if m not in trained:
            load_method_cfg(m)
    workers = block.get("workers")
    if workers is not None:
        workers = check_number("paper.workers", workers, int)
        if workers < 1:
            raise ConfigError(f"paper.workers must be >= 1 (or null: one per usable core), got {workers}")
    composed = cfg.copy()
    with open_dict(composed):
        composed.fresh = False  # the jobs' folders are inside the run's, which the run sets aside itself
    return PaperSettings(
        methods=methods,
        trained=trained,
        seeds=tuple(int(s) for s in block.seeds),
        composed=OmegaConf.to_yaml(composed, resolve=True),
        workers=workers,
        train_predictor=bool(block.get("train_predictor", True)),
        stress_scenario=None if not block.get("stress_scenario") else str(block.stress_scenario),
    )


def _predictor_training(cfg: DictConfig, pred: dict | None, stage: str) -> PredictorTraining | None:
    """The predictor stage's fit, or None when there is nothing to train: the run's predictor kind trains here when
    it has a registered trainer and ``predictor_stage`` asks (``auto``: the kind's ``pipeline: true``; ``train``: any
    such kind; ``skip``: none), and no checkpoint is given (``stage=predictor`` trains even then). The kind's
    registered ``settings`` parse its config laid over the kind's own YAML (a variant, ``qr_q``, names only its
    band); without them the trainer reads the run config (mara/train.py run_trainer)."""
    kind = None if pred is None else registry.predictor_entry(str(pred.get("name", "fm")), missing_ok=True)
    mode = cfg.get("predictor_stage", "auto")
    trains = kind is not None and kind.trainer and (mode == "train" or (mode == "auto" and kind.pipeline))
    if not trains or (stage == "all" and pred.get("ckpt_path")):
        return None
    fit = None
    if kind.settings:
        full = plain_config(OmegaConf.merge(OmegaConf.load(registry.predictor_file(kind.name)), cfg.predictor))
        full.pop("registry", None)
        fit = registry.import_object(kind.settings).from_config(full)
    return PredictorTraining(
        fit=fit,
        output_dir="predictor",  # the run's folder, set by the stage
        bank_path=(cfg.get("bank") or {}).get("path"),
        seed=int(cfg.get("seed", 0)),
        trainer=plain_config(cfg.get("trainer")) or {},
        kind=kind.name,
        trained_by=str(kind.trainer),
        config=pred,
    )


def predictor_training(cfg: DictConfig) -> PredictorTraining:
    """The FM's training of a config with ``predictor``, ``bank.path``, ``seed``, ``trainer`` and ``paths.output_dir``
    (a job of the paper's pipeline)."""
    return PredictorTraining(
        fit=FlowFitSettings.from_config(plain_config(cfg.predictor)),
        output_dir=str(cfg.paths.output_dir),
        bank_path=(cfg.get("bank") or {}).get("path"),
        seed=int(cfg.get("seed", 0)),
        trainer=plain_config(cfg.get("trainer")) or {},
    )


def trained_method(cfg: DictConfig) -> str:
    """The paper name of the policy a composed ``train`` config trains."""
    mat = plain_config(cfg.get("mat")) or {}
    return policy_method(cfg.get("reward", "dense"), cfg.predictor.get("name"), mat)


def run_predictor_key(cfg: DictConfig) -> str | None:
    """The ``predictors.<key>`` entry that is this run's training predictor, so the evaluation builds the policy's
    predictor from the same config (``predictor=qr`` → ``qr``, not MARA-QR's default ``qr_q``)."""
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
        same = [
            k
            for k, v in preds.items()
            if v is not None and v.get("name") == pred.name and v.get("band") == pred.get("band")
        ]
        key = same[0] if same else str(pred.name)
    return key


# ------------------------------------------------------------------------------------------ the run, stage by stage
@dataclass(frozen=True)
class RunSettings:
    """The settings in one run folder, as the stages go: the predictor config and the policy's settings with the
    checkpoints this folder holds or the predictor stage wrote; ``trained``: {predictor kind: the checkpoint every
    predictor of that kind in the evaluation reads} (empty: the configured ones)."""

    settings: TrainSettings
    folder: str
    predictor_config: dict | None = None
    policy: MatSettings | None = None
    policy_ckpt: str | None = None
    trained: dict = field(default_factory=dict)

    @property
    def method_overrides(self) -> dict:
        return self.settings.method_overrides

    @property
    def predictor_key(self) -> str | None:
        return self.settings.predictor_key

    def with_predictor_ckpt(self, kind: str, ckpt: str) -> "RunSettings":
        """The run reading the ``kind`` checkpoint ``ckpt``: as its own predictor's (when the run's predictor is of
        that kind: the policy trains on it) and as every ``kind`` predictor's of the evaluation."""
        run = replace(self, trained={**self.trained, kind: ckpt})
        if self.predictor_config is None or self.predictor_config.get("name") != kind:
            return run
        pred = {**self.predictor_config, "ckpt_path": ckpt}
        policy = None if self.policy is None else replace(self.policy, predictor=pred)
        return replace(run, predictor_config=pred, policy=policy)


def with_run_folder(settings: TrainSettings, folder: Path) -> RunSettings:
    """The run in its folder: a later stage uses that folder's products — ``<run>/predictor/<kind>.ckpt`` of every
    registered predictor kind (unless a predictor checkpoint is given) and, for ``stage=evaluate``,
    ``<run>/policy/checkpoints/best.ckpt`` (unless ``policy_ckpt`` is given)."""
    out = Path(folder)
    run = RunSettings(settings, str(out), settings.predictor_config, settings.policy, settings.policy_ckpt)
    if settings.stage not in ("policy", "evaluate"):
        return run
    if not (settings.predictor_config or {}).get("ckpt_path"):
        for kind in registry.predictor_kinds():
            trained = out / "predictor" / f"{kind}.ckpt"
            if trained.exists():
                run = run.with_predictor_ckpt(kind, str(trained))
                log.info(f"using this run's predictor {trained}")
    best = out / "policy" / "checkpoints" / "best.ckpt"
    if settings.stage == "evaluate" and not settings.policy_ckpt and best.exists():
        run = replace(run, policy_ckpt=str(best))
        log.info(f"using this run's policy {best}")
    return run


def run_evaluation_settings(run: RunSettings, methods: list[str], overrides: dict) -> EvaluationSettings:
    """The settings of the run's evaluation stage: the parsed evaluation with these methods and overrides, and the
    run's predictor config (and the checkpoints its predictor stage wrote) where the evaluation builds predictors:
    every predictor of a trained kind reads this run's checkpoint, and the methods that name the run's predictor key
    find the run's predictor under it."""
    evaluation = run.settings.evaluation
    if evaluation is None:
        raise ConfigError("this run has no evaluation stage (stage=all or stage=evaluate evaluates)")
    preds = {k: None if v is None else plain_config(v) for k, v in evaluation.predictors.items()}
    own = run.predictor_config
    for kind, ckpt in run.trained.items():
        if kind not in preds and (own or {}).get("name") == kind:
            preds[kind] = dict(own)
        for key, spec in preds.items():
            if spec is not None and spec.get("name") == kind:
                preds[key] = {**spec, "ckpt_path": ckpt}
    key = run.predictor_key
    if key is not None and any((o or {}).get("predictor") == key for o in overrides.values()):
        preds[key] = None if own is None else dict(own)  # may carry this run's FM checkpoint or command-line overrides
    return replace(
        evaluation,
        methods=tuple(methods),
        method_overrides=overrides,
        predictors={k: None if v is None else OmegaConf.create(v) for k, v in preds.items()},
    )
