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

``mat_settings`` also reads a bare conf/mat recipe (``load_recipe``), as the bench and the tests train from one.
"""

from __future__ import annotations

from dataclasses import dataclass, field, fields, replace
from pathlib import Path
from typing import Mapping

from hydra.core.hydra_config import HydraConfig
from omegaconf import DictConfig, OmegaConf, open_dict

from mara.core import registry
from mara.core.config import ConfigError, conf_dir, load_method_cfg, plain_config
from mara.core.rundir import STAGE_SETTINGS, folder_of, stage_settings
from mara.core.runlog import log
from mara.eval.settings import EvaluationSettings, check_number, evaluation_settings, node_options, protocol_settings
from mara.mat.settings import (
    ImitationSettings,
    MatSettings,
    PPOSettings,
    RolloutSettings,
    SuiteEntry,
    TrainerSettings,
    ValidationSettings,
    WorkloadSettings,
)
from mara.mat.trace_settings import WARMUP_DAYS, TracePolicySettings, TraceWindowSpec
from mara.mat.trace_train import trace_windows
from mara.mat.train import policy_method
from mara.predictors.factory import predictor_config, trained_predictor_mismatch
from mara.predictors.fit_settings import FlowFitSettings, PredictorTraining
from mara.sim.env import check_node_options
from mara.sim.settings import SimSettings
from mara.traces.target_run import BANDS

STAGES = ("all", "predictor", "policy", "evaluate")
#: what the predictor stage does with the run's predictor: ``auto`` trains a kind whose registry says
#: ``pipeline: true`` (the FM), ``train`` any kind with a registered trainer, ``skip`` none
PREDICTOR_STAGE = ("auto", "train", "skip")
EVAL_ROOTS = set(range(5))


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
        if load_method_cfg(m).get("trace_only") and evaluates:
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


# ----------------------------------------------------------------------------------------- MARA's trace policy
#: the trace policy's settings that count something, required (``>= 0``) and those with a default (``>= 1``)
TRACE_COUNTS = ("imitation_epochs", "pg_rounds", "samples", "top_k", "hidden")
TRACE_POSITIVE = ("threads", "keep", "windows_per_round")
TRACE_SHARES = ("prior_quantile", "declare_quantile")  # quantiles, in [0, 1]
TRACE_RATES = ("lr", "pg_lr")  # learning rates, > 0
WINDOW_NEEDS = ("path", "cluster", "start_day", "days", "count")


def trace_policy_settings(cfg: DictConfig) -> TracePolicySettings:
    """The trace policy's training settings: the ``trace_mara`` block of ``cfg`` and its ``seed``, every setting
    checked and every window spec's trace read (one ``ConfigError`` line), before any work."""
    tm = plain_config(cfg.get("trace_mara")) or {}
    if not isinstance(tm, dict):
        raise ConfigError(f"trace_mara must be a block of settings, got {tm!r}")
    for k in ("train", "val"):
        if not tm.get(k):
            raise ConfigError(f"trace_mara.{k} is empty: list the {k} windows")
    for k in TRACE_COUNTS:
        v = tm.get(k)
        if isinstance(v, bool) or not isinstance(v, int) or v < 0:
            raise ConfigError(f"trace_mara.{k} must be an integer >= 0, got {v!r}")
    if tm.get("band") not in BANDS:
        raise ConfigError(f"trace_mara.band must be one of {', '.join(BANDS)}, got {tm.get('band')!r}")
    if tm.get("predictor") not in registry.trace_predictors():  # the kinds registered with traces: true
        raise ConfigError(
            f"trace_mara.predictor must be one of {', '.join(registry.trace_predictors())}, got {tm.get('predictor')!r}"
        )
    known = {f.name for f in fields(TracePolicySettings)} - {"seed"}  # the seed is the run's
    unknown = sorted(set(tm) - known)
    if unknown:
        raise ConfigError(f"trace_mara: unknown setting{'s' if len(unknown) > 1 else ''} {', '.join(unknown)}")
    given = dict(tm)
    for k in TRACE_POSITIVE + ("target_seed",):
        if k in given:
            given[k] = check_number(f"trace_mara.{k}", given[k], int)
            if k in TRACE_POSITIVE and given[k] < 1:
                raise ConfigError(f"trace_mara.{k} must be an integer >= 1, got {given[k]!r}")
    for k in TRACE_SHARES + TRACE_RATES:
        if k in given:
            given[k] = check_number(f"trace_mara.{k}", given[k], float)
            if k in TRACE_SHARES and not 0 <= given[k] <= 1:
                raise ConfigError(f"trace_mara.{k} must be in [0, 1], got {given[k]!r}")
            if k in TRACE_RATES and given[k] <= 0:
                raise ConfigError(f"trace_mara.{k} must be > 0, got {given[k]!r}")
    for where in ("train", "val"):
        if not isinstance(given[where], list):
            raise ConfigError(f"trace_mara.{where} must be a list of windows, got {given[where]!r}")
        given[where] = tuple(trace_window_spec(spec, where) for spec in given[where])
    return TracePolicySettings(**given, seed=check_number("seed", cfg.get("seed", 0), int))


def trace_window_spec(spec, where: str) -> TraceWindowSpec:
    """One window spec of ``trace_mara.<where>``, checked, its trace read and its windows cut (one ``ConfigError``
    line: a missing setting or trace, a spec no window fits)."""
    if not isinstance(spec, dict):
        raise ConfigError(f"trace_mara.{where}: each entry needs {', '.join(WINDOW_NEEDS)}; got {spec!r}")
    for k in WINDOW_NEEDS:
        if k not in spec:
            raise ConfigError(f"trace_mara.{where}: each entry needs {k} (path, cluster, start_day, days, count)")
    unknown = sorted(set(spec) - {f.name for f in fields(TraceWindowSpec)})
    if unknown:
        raise ConfigError(
            f"trace_mara.{where}: unknown setting{'s' if len(unknown) > 1 else ''} "
            f"{', '.join(unknown)} (path, cluster, split, start_day, days, warmup_days, count)"
        )
    split = spec.get("split", "train")
    if split not in WARMUP_DAYS:
        raise ConfigError(f"trace_mara.{where}: split must be one of {', '.join(WARMUP_DAYS)}, got {split!r}")
    given = {k: spec[k] for k in ("start_day", "days")} | {"warmup_days": spec.get("warmup_days", WARMUP_DAYS[split])}
    number = {k: check_number(f"trace_mara.{where}.{k}", v, float) for k, v in given.items()}
    count = check_number(f"trace_mara.{where}.count", spec["count"], int)
    if number["days"] <= 0 or number["warmup_days"] < 0 or count < 1:
        raise ConfigError(
            f"trace_mara.{where}: days must be > 0, warmup_days >= 0 and count >= 1, got "
            f"{number['days']:g}, {number['warmup_days']:g}, {count}"
        )
    out = TraceWindowSpec(path=str(spec["path"]), cluster=str(spec["cluster"]), count=count, split=split, **number)
    trace_windows(out, where)  # a missing trace or a spec no window fits stops here
    return out


# ------------------------------------------------------------------------------------------------- the MAT recipe
def load_recipe(name: str) -> DictConfig:
    """A bare conf/mat/<name>.yaml (or conf/experiments/mat/, or a ``MARA_CONF_PATH`` folder's: Hydra's search
    path) laid over the recipes its ``defaults`` list names (default → band → clone), as Hydra composes it under
    ``mat=<name>``."""
    cfg = OmegaConf.load(registry.find_conf("mat", f"{name}.yaml") or conf_dir("mat", f"{name}.yaml"))
    base = OmegaConf.create()
    for entry in cfg.pop("defaults", []) or []:
        if entry != "_self_":
            base = OmegaConf.merge(base, load_recipe(str(entry)))
    return OmegaConf.merge(base, cfg)


def merged_recipe(cfg: DictConfig) -> dict:
    """The MAT recipe as a plain dict: ``cfg.mat`` with the pipeline's shared keys (``seed``, ``reward``,
    ``ckpt_path``, ``predictor``, ``paths.output_dir``, ``sim``, ``bank.path``, ``trainer.accelerator/devices/
    strategy``) laid over it when ``cfg`` is the full conf/train.yaml; a bare conf/mat recipe as it is."""
    if "mat" not in cfg:
        return OmegaConf.to_container(cfg, resolve=True)
    c = OmegaConf.to_container(cfg.mat, resolve=True)
    for key in ("seed", "reward", "ckpt_path"):
        if cfg.get(key) is not None:
            c[key] = cfg[key]
    if cfg.get("predictor") is not None:
        c["predictor"] = OmegaConf.to_container(cfg.predictor, resolve=True)
    if cfg.get("paths") is not None and cfg.paths.get("output_dir"):
        c["output_dir"] = cfg.paths.output_dir
    if cfg.get("bank") is not None and cfg.bank.get("path"):
        c["bank_path"] = cfg.bank.path
    if cfg.get("sim") is not None:
        for ours, theirs in (
            ("n_nodes", "nodes"),
            ("max_active", "max_active"),
            ("n_steps", "steps"),
            ("obs_every", "obs_every"),
            ("beta", "beta"),
        ):
            if cfg.sim.get(theirs) is not None:
                c["sim"][ours] = cfg.sim[theirs]
        speed, cost = plain_config(cfg.sim.get("node_speed")), cfg.sim.get("switch_cost") or 0
        c["sim"]["node_speed"], c["sim"]["switch_cost"] = speed, cost
    if cfg.get("trainer") is not None:
        for key in ("accelerator", "devices", "strategy"):
            if cfg.trainer.get(key) is not None:
                c["trainer"][key] = cfg.trainer[key]
    return c


def _section(cls, where: str, given):
    """``cls(**given)``, or one ConfigError line naming the keys ``cls`` does not have."""
    given = dict(given or {})
    unknown = sorted(set(given) - {f.name for f in fields(cls)})
    if unknown:
        raise ConfigError(f"{where}: unknown setting{'s' if len(unknown) > 1 else ''} {', '.join(unknown)}")
    return cls(**given)


def _suite_entry(i: int, s) -> SuiteEntry:
    """One ``mat.imitation.suite`` entry, checked (one ConfigError line)."""
    s = dict(s)
    unknown = set(s) - {"nodes", "max_active", "node_speed", "switch_cost", "teacher"}
    if unknown or "nodes" not in s or "max_active" not in s:
        raise ConfigError(
            f"mat.imitation.suite[{i}] needs nodes and max_active (and optionally node_speed, "
            f"switch_cost, teacher); got keys {sorted(s)}"
        )
    m, k = int(s["nodes"]), int(s["max_active"])
    if m < 1 or k < 1:
        raise ConfigError(f"mat.imitation.suite[{i}]: nodes and max_active must be >= 1, got {m}, {k}")
    speed = s.get("node_speed")
    if speed is not None and len(speed) != m:
        raise ConfigError(f"mat.imitation.suite[{i}]: node_speed has {len(speed)} entries for {m} nodes")
    cost = s.get("switch_cost")
    return SuiteEntry(
        m,
        k,
        None if speed is None else tuple(int(x) for x in speed),
        None if cost is None else int(cost),
        None if s.get("teacher") is None else str(s["teacher"]),
    )


def mat_settings(cfg: DictConfig) -> MatSettings:
    """The typed, checked settings of the policy stage (full conf/train.yaml or a bare conf/mat recipe)."""
    c = merged_recipe(cfg)
    sim = c.get("sim") or {}
    try:
        speed, cost = check_node_options(
            sim.get("node_speed"), sim.get("switch_cost") or 0, int(sim["n_nodes"]), int(sim["obs_every"])
        )
    except ValueError as exc:
        raise ConfigError(str(exc)) from None
    sim_settings = SimSettings(
        nodes=int(sim["n_nodes"]),
        max_active=int(sim["max_active"]),
        steps=int(sim["n_steps"]),
        obs_every=int(sim["obs_every"]),
        beta=sim["beta"],
        node_speed=None if speed is None else tuple(int(x) for x in speed),
        switch_cost=int(cost),
    )
    im = dict(c.get("imitation") or {})
    im["suite"] = tuple(_suite_entry(i, s) for i, s in enumerate(im.get("suite") or []))
    wl = dict(c["workload"])
    if not isinstance(wl.get("load", 0.04), (int, float)):
        wl["load"] = tuple(wl["load"])
    val = dict(c["validation"])
    val["roots"] = tuple(val["roots"])
    pred = c.get("predictor")
    settings = MatSettings(
        net=dict(c["net"]),
        sim=sim_settings,
        ppo=_section(PPOSettings, "mat.ppo", c["ppo"]),
        rollout=_section(RolloutSettings, "mat.rollout", c["rollout"]),
        workload=_section(WorkloadSettings, "mat.workload", wl),
        validation=_section(ValidationSettings, "mat.validation", val),
        imitation=_section(ImitationSettings, "mat.imitation", im),
        trainer=_section(TrainerSettings, "mat.trainer", c["trainer"]),
        reward=c.get("reward", "dense"),
        predictor={"name": pred} if isinstance(pred, str) else pred,
        bank_path=c.get("bank_path"),
        seed=int(c.get("seed", 0)),
        total_env_steps=c["total_env_steps"],
        num_threads=c.get("num_threads", 1),
        init_from=c.get("init_from"),
        ckpt_path=c.get("ckpt_path"),
        output_dir=c.get("output_dir"),
        run_name=c.get("run_name"),
    )
    check_recipe(settings)
    return settings


def check_recipe(settings: MatSettings) -> None:
    """The recipe's own consistency: a suite for ``rollout.suite`` / ``validation.suite``, training roots apart from
    the evaluation and validation roots (one ConfigError line)."""
    for key in ("rollout", "validation"):
        if getattr(settings, key).suite and not settings.imitation.suite:
            raise ConfigError(f"mat.{key}.suite=true needs the settings of mat.imitation.suite (recipe mat=suite_ppo)")
    if settings.workload.train_root + settings.seed in EVAL_ROOTS | set(settings.validation.roots):
        raise ConfigError("mat.workload.train_root + seed must differ from the evaluation (0–4) and validation roots")


def check_teacher_predictor(settings: MatSettings) -> None:
    """The imitation teacher reads MAT's own frozen predictor (by design: MARA-WLS imitates the slack rule on WLS
    estimates). That is sound for rules defined on any predictor's median and band (Slack-FM, Slack-FM-q), not for
    the decision head's rules, which read levels only the head was trained at (Slack-QR-q's 0.05 level, Slack-QR's
    band): fed another predictor they would silently become another rule. So a teacher whose predictor is the head
    (``qr`` kind) must be given that very predictor — or, for a rule that judges at the median (no ``quantile``:
    Slack-QR, Slack-QR-displace), the same head with the same median and upper end, the only levels it reads.
    One-line ConfigError otherwise. The privileged ``truth`` teacher (Slack-Truth) reads the simulator and is always
    allowed. Every teacher of ``mat.imitation.suite`` is checked."""
    im = settings.imitation
    if not im.enabled or not im.teacher or settings.ckpt_path:
        return
    teachers = [str(im.teacher)] + [s.teacher for s in im.suite if s.teacher]
    pred = settings.predictor
    bare = pred is not None and set(pred) == {"name"}  # a bare recipe names its predictor: the group's file
    given = predictor_config(pred["name"]) if bare else pred
    for teacher in dict.fromkeys(teachers):
        mcfg = load_method_cfg(teacher)
        wants = mcfg.get("predictor")
        if wants in (None, "truth") or predictor_config(wants).get("name") != "qr":
            continue
        why = trained_predictor_mismatch(given, wants)
        if why and given is not None and (mcfg.get("allocator") or {}).get("quantile") is None:
            why = None if reads_same_median_and_upper(given, predictor_config(wants)) else why
        if why or pred is None:
            have = None if pred is None else pred["name"]
            raise ConfigError(
                f"mat.imitation.teacher={teacher} reads predictor {wants!r} but this policy is "
                f"trained with {have!r}: give the same predictor (e.g. `mat=default predictor=qr_q`) "
                f"or a teacher made for {have!r}"
            )


def reads_same_median_and_upper(a, b) -> bool:
    """Two predictor configs of one kind and checkpoint whose bands share the median and the upper end."""
    band_a, band_b = (list(plain_config(x.get("band")) or []) for x in (a, b))
    return (
        a.get("name") == b.get("name")
        and a.get("ckpt_path") == b.get("ckpt_path")
        and len(band_a) == len(band_b) == 3
        and band_a[1:] == band_b[1:]
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
