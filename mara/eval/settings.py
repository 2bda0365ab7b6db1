"""Typed settings of an evaluation, parsed once from the composed config at the entry point.

``from_cfg(cfg)`` turns the composed Hydra config into frozen dataclasses: the simulator (``sim.*``), the evaluation
protocol (``eval.*``, ``scenario``, task sets, ε/budget table), the prediction benchmark (``prediction.*``) and the
leave-one-family-out benchmark (``lofo.*``). The evaluation modules (runner, prediction, decision points, LOFO)
receive only the settings they use and never read the config. The checks that need the whole config (one line,
before any work) live in mara/preflight/; the constructors here raise ``ConfigError`` on a value of the wrong type
or range, so a settings object that exists is one the evaluation can run.

Predictor and method configs stay configs: they are the predictors' and methods' own settings, read by
``mara.predictors.factory.predictor_from`` and ``mara.core.config.load_method_cfg``.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path
from typing import Mapping

from omegaconf import DictConfig, OmegaConf

from mara.core.config import ConfigError, conf_dir, plain_config
from mara.core.registry import predictor_file, trace_predictors
from mara.curves.bank import CurveBank, default_bank_path, load_bank, shipped_bank_path
from mara.sim.settings import SimSettings, check_number, node_options, validate_sim_cfg  # noqa: F401  (re-exported)
from mara.sim.workload import TaskSet
from mara.traces.schema import SHIPPED_SAMPLE
from mara.traces.target_prediction import read_trace_jobs


def resolve_roots(roots) -> list[int]:
    """``eval.roots``: an int n means roots 0..n-1; a list is taken as is."""
    if isinstance(roots, int):
        if roots < 1:
            raise ConfigError(f"eval.roots must be >= 1 (or a list of roots), got {roots}")
        return list(range(roots))
    if isinstance(roots, (str, float)) or roots is None:
        raise ConfigError(f"eval.roots must be an integer n (roots 0..n-1) or a list of roots, got {roots!r}")
    if len(roots) == 0:
        raise ConfigError(
            "eval.roots=[] names nothing: give at least one value (an integer n: roots 0..n-1, or a list of roots)"
        )
    return [check_number("eval.roots", r, int) for r in roots]


@dataclass(frozen=True)
class EvalProtocol:
    """Which episodes to evaluate on."""

    task_sets: list[str]
    loads: list[float]
    roots: list[int]
    episodes: int = 12
    scenario: str = "random"


@dataclass(frozen=True)
class StressSettings:
    """The infeasible-task stress scenario (conf/scenario/stress.yaml)."""

    n_infeasible: int
    n_short: int
    short_arrival: int
    infeasible_budget: int
    short_budget: int
    short_need: tuple[int, int]


@dataclass(frozen=True)
class Workload:
    """What the episodes are drawn from: the configured task sets, the ε/budget table (None: the bank's own) and,
    for ``scenario=stress``, the stress settings."""

    task_sets: Mapping[str, TaskSet] = field(default_factory=dict)
    family_table: dict | None = None
    stress: StressSettings | None = None


@dataclass(frozen=True)
class EvaluationSettings:
    """Everything ``python -m mara.evaluate`` reads: simulator, protocol, workload, bank, methods, run-folder options.

    ``predictors``: the run's configured predictors (name → predictor config); ``recorded``: ``eval.*`` as configured
    (roots unresolved), the protocol record a resumed run folder compares."""

    sim: SimSettings
    protocol: EvalProtocol
    workload: Workload
    bank_path: str | None = None
    methods: tuple[str, ...] = ()
    method_overrides: dict = field(default_factory=dict)
    shipped_policies: bool = True
    predictors: Mapping[str, DictConfig] = field(default_factory=dict)
    resume: bool = True
    tensorboard: bool = True
    recorded: dict = field(default_factory=dict)


@dataclass(frozen=True)
class DecisionPointSettings:
    """``prediction.decision_points``: loads rolled, {label: method} policies, extra band quantiles of the FM label."""

    loads: tuple[float, ...]
    policies: dict
    quantiles: tuple[float, ...] = ()


@dataclass(frozen=True)
class TraceJobSettings:
    """``prediction.trace_jobs``: the trace whose first ``first`` jobs (as target-loss jobs) the predictors are
    scored on, per model and observed fraction (mara/traces/target_prediction.py)."""

    path: str
    first: int = 100
    predictors: tuple[str, ...] = field(default_factory=trace_predictors)  # kinds registered with traces: true


@dataclass(frozen=True)
class PredictionSettings:
    """The prediction benchmark (``experiment=prediction``): the FM and WLS predictor configs, the bank, the query
    ranks, observation period, ε/budget seed, decision quantiles and, when enabled, the decision points."""

    fm: DictConfig
    wls: DictConfig
    bank_path: str | None = None
    n_ranks: int = 8
    obs_every: int = 10
    seed: int = 0
    decision_quantiles: tuple | None = (0.05,)
    decision_points: DecisionPointSettings | None = None
    extra: tuple = ()  # ((label, predictor config), ...): more rows beside FM and WLS (prediction.extra)
    trace_jobs: TraceJobSettings | None = None


@dataclass(frozen=True)
class LofoSettings:
    """The leave-one-family-out benchmark (``experiment=prediction_lofo``, ``lofo.*``)."""

    fm: DictConfig
    wls: DictConfig
    bank_path: str | None = None
    families: tuple[str, ...] | None = None
    test_splits: tuple[str, ...] = ("fm_val", "pool")
    seed: int = 0
    n_ranks: int = 8
    obs_every: int = 10
    max_epochs: int = 10
    train_examples: int = 4096
    reuse_dir: str | None = None


@dataclass(frozen=True)
class Settings:
    """What one ``mara.evaluate`` run does: ``kind`` (evaluate, prediction, prediction_lofo) and its settings."""

    kind: str = "evaluate"
    evaluation: EvaluationSettings | None = None
    prediction: PredictionSettings | None = None
    lofo: LofoSettings | None = None


def from_cfg(cfg: DictConfig) -> Settings:
    """The typed settings of a composed ``evaluate`` config; only what its experiment kind reads is parsed."""
    kind = cfg.get("experiment_kind") or "evaluate"
    if kind == "prediction_lofo":
        return Settings("prediction_lofo", lofo=lofo_settings(cfg))
    if kind == "prediction":
        pred = prediction_settings(cfg)
        return Settings(
            "prediction", evaluation=evaluation_settings(cfg) if pred.decision_points else None, prediction=pred
        )
    return Settings("evaluate", evaluation=evaluation_settings(cfg))


def protocol_settings(cfg: DictConfig) -> EvalProtocol:
    """The evaluation protocol (``eval.*``, ``sim.loads``, ``scenario``), checked with ``sim.*``."""
    scenario = cfg.scenario.name if cfg.get("scenario") else "random"
    validate_sim_cfg(cfg.sim)
    ev = cfg.eval
    if check_number("eval.episodes", ev.episodes, int) < 1:
        raise ConfigError(f"eval.episodes must be >= 1, got {ev.episodes}")
    return EvalProtocol(
        task_sets=list(ev.task_sets),
        loads=[float(x) for x in cfg.sim.loads],
        roots=resolve_roots(plain_config(ev.roots)),
        episodes=int(ev.episodes),
        scenario=scenario,
    )


def workload_settings(cfg: DictConfig) -> Workload:
    """The task sets (``tasksets``), the ε/budget table (``family_params``) and the stress scenario's settings."""
    task_sets = {
        name: TaskSet(
            name=ts.name,
            families=tuple(ts.families),
            ood_family=ts.get("ood_family"),
            ood_prob=float(ts.get("ood_prob", 0.0)),
        )
        for name, ts in (cfg.get("tasksets") or {}).items()
    }
    fp = cfg.get("family_params")
    table = None if fp is None or fp.get("from_bank", False) else plain_config(fp.table)
    sc, stress = cfg.get("scenario"), None
    if sc and sc.get("name") == "stress":
        stress = StressSettings(
            int(sc.n_infeasible),
            int(sc.n_short),
            int(sc.short_arrival),
            int(sc.infeasible_budget),
            int(sc.short_budget),
            tuple(sc.short_need),
        )
    return Workload(task_sets=task_sets, family_table=table, stress=stress)


def evaluation_settings(cfg: DictConfig) -> EvaluationSettings:
    """The settings of an evaluation run (``python -m mara.evaluate``, ``mara.train``'s evaluate stage)."""
    protocol = protocol_settings(cfg)
    ev = cfg.eval
    recorded = plain_config(ev)
    overrides = cfg.get("method_overrides")
    return EvaluationSettings(
        sim=SimSettings.from_cfg(cfg.sim),
        protocol=protocol,
        workload=workload_settings(cfg),
        bank_path=(cfg.get("bank") or {}).get("path"),
        methods=tuple(cfg.get("methods") or ()),
        method_overrides=plain_config(overrides) if overrides else {},
        shipped_policies=bool(cfg.get("shipped_policies", True)),
        predictors=dict(cfg.get("predictors") or {}),
        resume=bool(ev.get("resume", True)),
        tensorboard=bool(ev.get("tensorboard", True)),
        recorded={k: v for k, v in recorded.items() if k not in ("resume", "tensorboard")},
    )


def _predictor_cfg(name: str, *given):
    """The first predictor config given, else conf/predictor/<name>.yaml."""
    for spec in given:
        if spec:
            return spec
    return OmegaConf.load(predictor_file(name) or conf_dir("predictor", f"{name}.yaml"))


def prediction_settings(cfg: DictConfig) -> PredictionSettings:
    """``prediction.*``; FM/WLS: prediction.fm/wls, else predictors.fm/wls (so ``predictors.fm.ckpt_path=...``
    picks a checkpoint), else conf/predictor/*.yaml."""
    pc = cfg.get("prediction", {}) or {}
    composed = cfg.get("predictors", {}) or {}  # evaluate.yaml composes conf/predictor/* here (CLI-overridable)
    dp = pc.get("decision_points") or {}
    points = None
    if dp.get("enabled", False):
        points = DecisionPointSettings(
            loads=tuple(float(x) for x in dp.loads),
            policies=plain_config(dp.policies),
            quantiles=tuple(float(x) for x in (pc.get("decision_quantiles") or ())),
        )
    quantiles = pc.get("decision_quantiles", (0.05,))
    return PredictionSettings(
        fm=_predictor_cfg("fm", pc.get("fm"), composed.get("fm")),
        wls=_predictor_cfg("wls", pc.get("wls"), composed.get("wls")),
        bank_path=(cfg.get("bank", {}) or {}).get("path"),
        n_ranks=int(pc.get("n_ranks", 8)),
        obs_every=int(pc.get("obs_every", 10)),
        seed=int(pc.get("seed", 0)),
        decision_quantiles=None if quantiles is None else tuple(quantiles),
        decision_points=points,
        extra=_extra_predictors(pc.get("extra") or {}, composed),
        trace_jobs=trace_job_settings(pc.get("trace_jobs")),
    )


def trace_job_settings(tc) -> TraceJobSettings | None:
    """``prediction.trace_jobs`` ({enabled, path, first, predictors}; path null: the sample shipped in the package),
    None when off; a missing or unusable trace, ``first`` < 1 or an unknown predictor is a one-line ConfigError."""
    where = "prediction.trace_jobs"
    if tc is not None and not hasattr(tc, "get"):
        raise ConfigError(f"{where} must be a mapping {{enabled, path, first, predictors}} or null, got {tc!r}")
    if not tc or not tc.get("enabled", True):
        return None
    first = tc.get("first", 100)
    if isinstance(first, bool) or not isinstance(first, int) or first < 1:
        raise ConfigError(f"{where}.first must be an integer >= 1, got {first!r}")
    known = trace_predictors()
    preds = tc.get("predictors") or known
    preds = (preds,) if isinstance(preds, str) else tuple(preds)
    bad = [p for p in preds if p not in known]
    if bad:
        raise ConfigError(f"{where}.predictors: {bad} not scored on trace jobs; pick from {list(known)}")
    path = str(Path(tc.get("path") or SHIPPED_SAMPLE).expanduser())
    if not Path(path).is_file():
        raise ConfigError(f"{where}.path={path}: no such file")
    try:
        read_trace_jobs(path)
    except ConfigError as e:
        raise ConfigError(f"{where}.path: {e}") from None
    return TraceJobSettings(path=path, first=int(first), predictors=preds)


def _extra_predictors(extra, composed) -> tuple:
    """``prediction.extra`` ({label: predictor name}) → ((label, config), ...): the run's ``predictors.<name>``, else
    conf/predictor/<name>.yaml; an unknown name or a label taken by FM / WLS is a one-line ConfigError."""
    out = []
    for label, name in plain_config(extra).items():
        if label in ("FM", "WLS"):
            raise ConfigError(f"prediction.extra.{label}: FM and WLS are the benchmark's own rows; pick another label")
        if not isinstance(name, str) or not (composed.get(name) or predictor_file(name) is not None):
            raise ConfigError(f"prediction.extra.{label}={name!r}: not a predictor (a name in conf/predictor/)")
        out.append((str(label), _predictor_cfg(name, composed.get(name))))
    return tuple(out)


def lofo_settings(cfg: DictConfig) -> LofoSettings:
    """``lofo.*``, the bank and the FM/WLS predictor configs (predictors.fm/wls, else conf/predictor/*.yaml)."""
    lc = cfg.get("lofo", {}) or {}
    composed = cfg.get("predictors", {}) or {}
    families = lc.get("families")
    return LofoSettings(
        fm=_predictor_cfg("fm", composed.get("fm")),
        wls=_predictor_cfg("wls", composed.get("wls")),
        bank_path=(cfg.get("bank", {}) or {}).get("path"),
        families=None if families is None else tuple(families),
        test_splits=tuple(lc.get("test_splits", ("fm_val", "pool"))),
        seed=int(lc.get("seed", 0)),
        n_ranks=int(lc.get("n_ranks", 8)),
        obs_every=int(lc.get("obs_every", 10)),
        max_epochs=int(lc.get("max_epochs", 10)),
        train_examples=int(lc.get("train_examples", 4096)),
        reuse_dir=lc.get("reuse_dir"),
    )


def bank_at(path: str | None) -> CurveBank:
    """The run's curve bank: ``path`` (a shipped bank's name or a file), else the bank shipped in the package."""
    return load_bank(shipped_bank_path(path) if path else default_bank_path())


def load_bank_from_cfg(cfg: DictConfig) -> CurveBank:
    """The curve bank of ``cfg.bank.path`` (live mode's entry point reads it so)."""
    return bank_at(cfg.bank.get("path"))
