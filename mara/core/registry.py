"""The registry: every method and every predictor kind, each registered once, in its own YAML.

A method is ``conf/method/<NAME>.yaml`` (or ``conf/experiments/method/<NAME>.yaml`` for a variant kept apart from
the product: still runnable by name, in no default list). Besides the settings the runner builds it from, the file
says how the rest of the package treats it:

- ``kind``: ``policy`` (acts in the simulator) or ``bound`` (computed from the episodes by ``compute``, a function
  ``(method config, episodes, sim settings, progress) -> (successes [E], extra row fields)``);
- ``bound: true``: a policy that reads what no allocator can know (true remaining batches): reported as a bound,
  refused as a "best rule"; a ``kind: bound`` method is one too;
- ``report: {colour, marker, order}``: its line in every figure; ``order`` places it in lists and tables;
- ``lists: [train, evaluate]``: the default method lists it joins (``methods:`` of conf/train.yaml, conf/evaluate.yaml);
- ``teacher: true``: a rule a MAT policy may imitate (``mat.imitation.teacher``);
- ``validation_baseline: true``: run beside the policy on the MAT validation episodes;
- none of these is inherited through ``defaults`` (``LARA-best`` starts from ``LARA``'s settings, not its lists);
- ``trained_as: {rank, when}`` (learned methods): a policy checkpoint is this method when its training record
  (``reward``, ``predictor`` kind and the MAT recipe's keys, dotted) matches every ``when`` entry; the lowest ``rank``
  that matches names it. ``true`` / ``false`` match any set / unset value, anything else must be equal.

A learned method is one whose allocator loads trained weights (a ``mara.mat`` target, ``ckpt_path``).

A method that schedules job traces says how in its trace keys (``Method.trace``, a ``TraceKeys``):
``trace_scheduler`` (the block its trace scheduler is built from: ``_target_`` and the class's arguments),
``trace_only: true`` (no allocator for the paper's simulator), ``trace_count`` (the count it plans on for
target-loss jobs: ``declared`` | ``true`` | ``none`` | ``predicted``), and for a ``predicted`` count
``trace_predictor`` (a registered predictor kind), ``trace_band`` (``lo`` | ``median`` | ``hi``) and
``trace_prior_quantile`` (in (0, 1]). ``trace_keys`` reads and checks them, from a method's YAML or from its config
with a run's overrides laid over it.

A predictor kind is ``conf/predictor/<kind>.yaml`` whose ``name`` is its own file name and which has a ``registry``
block: ``builder`` (a class with ``from_config(cfg, bank_path)``), ``checkpoint: {kind, loader, holds}`` (the file it
reads: the ``kind`` field written in it, the function that loads one as data, what it is in words), ``trainer`` (a
function writing ``<output folder>/<kind>.ckpt``: ``mara.train``'s predictor stage; it takes a ``PredictorTraining``
(mara/predictors/fit_settings.py) whose ``fit`` is the kind's ``settings`` class (``from_config(predictor config)``)
parsed before any work, or, for a kind that registers no ``settings``, the run config: ``predictor``, ``bank.path``,
``seed``, ``trainer``, ``paths.output_dir``),
``pipeline: true`` (the predictor stage trains it under ``predictor_stage=auto``; a kind without it trains only
under ``predictor_stage=train``), ``traces: true`` (its estimates can be read on trace jobs, whose loss prefixes are
rows of the curve bank: mara/predictors/estimates.py) and
``privileged: true`` (reads the task's own curve: a bound, refused to learned policies). Other files of the group are
variants of a kind (``qr_q``: ``name: qr`` at other band levels).

``MARA_CONF_PATH`` (folders separated by ``os.pathsep``) adds config folders searched before ``conf/``: a method or a
predictor can live outside the package (the registry test adds a throwaway rule and predictor that way).
"""

from __future__ import annotations

import importlib
import os
from dataclasses import dataclass, field
from functools import lru_cache
from pathlib import Path

from omegaconf import OmegaConf

from mara.core.paths import CONF_DIR, ConfigError

#: the default method lists a method may join (``lists:``), each the ``methods:`` of one entry point's config
LISTS = ("train", "evaluate")
#: the folder of a method group that holds the experiments: variants kept runnable, out of the default lists
EXPERIMENTS = "experiments"


#: the keys of a method's YAML that register it (never inherited from the method its ``defaults`` names)
REGISTRATION = ("bound", "compute", "report", "lists", "teacher", "validation_baseline", "trained_as")


def conf_dirs() -> list[Path]:
    """The config folders, searched in order: ``MARA_CONF_PATH``'s, the package's ``conf/``, then its experiments
    (``conf/experiments/``: the same groups, ``method/`` and ``mat/``, for the variants kept apart)."""
    extra = [Path(p) for p in os.environ.get("MARA_CONF_PATH", "").split(os.pathsep) if p]
    return [*extra, CONF_DIR, CONF_DIR / EXPERIMENTS]


def search_path() -> list[str]:
    """Hydra's ``hydra.searchpath`` (``${mara.searchpath:}`` in the entry points' configs): every config folder
    but ``conf/`` itself, so ``mat=suite_ppo`` finds ``conf/experiments/mat/suite_ppo.yaml``."""
    return [f"file://{Path(p).resolve()}" for p in conf_dirs() if Path(p).resolve() != CONF_DIR.resolve()]


def find_conf(*parts: str) -> Path | None:
    """The first ``<folder>/<parts>`` of :func:`conf_dirs` that exists, or None."""
    for folder in conf_dirs():
        path = folder.joinpath(*parts)
        if path.exists():
            return path
    return None


def import_object(path: str):
    """``"package.module.Name"`` (or ``"package.module:Name"``) imported: one-line ConfigError if it is not there."""
    module, _, attr = str(path).replace(":", ".").rpartition(".")
    try:
        return getattr(importlib.import_module(module), attr)
    except (ImportError, AttributeError, ValueError) as exc:
        raise ConfigError(f"cannot import {path!r} ({type(exc).__name__}: {exc})") from None


# ------------------------------------------------------------------------------------------------------ methods
def method_files() -> dict[str, Path]:
    """{method name: its YAML}: ``method/*.yaml`` of every config folder (the first folder that has a name wins)."""
    found: dict[str, Path] = {}
    for folder in conf_dirs():
        for path in sorted((folder / "method").glob("*.yaml")):
            found.setdefault(path.stem, path)
    return found


def method_yaml(name: str):
    """A method's own YAML laid over the methods its ``defaults`` list names (``LARA-best`` starts from ``LARA``),
    interpolations unresolved; ``defaults`` removed. One-line ConfigError for an unknown name or a broken file."""
    path = method_files().get(name)
    if path is None:
        raise ConfigError(f"unknown method {name!r}; available: {', '.join(sorted(method_files()))}")
    try:
        own = OmegaConf.load(path)
    except Exception as exc:
        first = str(exc).strip().splitlines()[0] if str(exc).strip() else type(exc).__name__
        raise ConfigError(f"method {name!r}: cannot read {path}: {first}") from None
    entries = own.pop("defaults", None) or []
    merged = OmegaConf.create()
    for entry in entries:
        if entry == "_self_":
            merged = OmegaConf.merge(merged, own)
        elif isinstance(entry, str):  # the base's settings, not its registration: each file registers itself
            if entry.rsplit("/", 1)[-1] not in method_files():
                raise ConfigError(f"method {name!r}: cannot compose {path}: its defaults name no method {entry!r}")
            base = method_yaml(entry.rsplit("/", 1)[-1])
            merged = OmegaConf.merge(merged, {k: v for k, v in base.items() if k not in REGISTRATION})
        else:
            raise ConfigError(f"method {name!r}: defaults entries are method names, got {entry!r}")
    if "_self_" not in entries:
        merged = OmegaConf.merge(merged, own)
    return merged


#: the counts a trace scheduler may plan on for target-loss jobs, and the band levels of a predicted count
TRACE_COUNTS = ("declared", "true", "none", "predicted")
TRACE_BANDS = ("lo", "median", "hi")
#: a method's trace keys, as its YAML spells them
TRACE_KEYS = ("trace_scheduler", "trace_only", "trace_count", "trace_predictor", "trace_band", "trace_prior_quantile")


@dataclass(frozen=True)
class TraceKeys:
    """How a method schedules job traces (see the module docstring); ``scheduler`` None: it does not."""

    scheduler: dict | None = None
    only: bool = False
    count: str | None = None
    predictor: str | None = None
    band: str | None = None
    prior_quantile: float | None = None
    bound: dict | None = None  # a bound over trace windows (kind: bound, trace_only): {compute, time_limit_s}


def trace_keys(name: str, cfg) -> TraceKeys:
    """The trace keys of method ``name`` from its config ``cfg`` (a mapping: its YAML, or its config with a run's
    overrides laid over it), checked: one-line ConfigError naming the method and the key."""
    get = cfg.get
    spec = get("trace_scheduler")
    if spec is not None:
        spec = OmegaConf.to_container(spec, resolve=True) if OmegaConf.is_config(spec) else spec
        if not isinstance(spec, dict) or not isinstance(spec.get("_target_"), str):
            raise ConfigError(f"method {name!r}: trace_scheduler must be a block with a _target_ class, got {spec!r}")
    only = get("trace_only", False)
    if not isinstance(only, bool):
        raise ConfigError(f"method {name!r}: trace_only must be true or false, got {only!r}")
    count = get("trace_count")
    if count is not None and count not in TRACE_COUNTS:
        raise ConfigError(f"method {name!r}: trace_count must be one of {', '.join(TRACE_COUNTS)}, got {count!r}")
    keys = TraceKeys(dict(spec) if spec else None, only, count, bound=_trace_bound(name, cfg, only))
    if count != "predicted":
        return keys
    band, pred, q = get("trace_band"), get("trace_predictor"), get("trace_prior_quantile")
    if band not in TRACE_BANDS:
        raise ConfigError(f"method {name!r}: trace_band must be one of {', '.join(TRACE_BANDS)}, got {band!r}")
    if not isinstance(pred, str) or pred not in trace_predictors():
        raise ConfigError(
            f"method {name!r}: trace_predictor must be one of {', '.join(trace_predictors())} (the kinds registered "
            f"with traces: true), got {pred!r}"
        )
    if isinstance(q, bool) or not isinstance(q, (int, float)) or not 0 < q <= 1:
        raise ConfigError(f"method {name!r}: trace_prior_quantile must be a number in (0, 1], got {q!r}")
    return TraceKeys(keys.scheduler, only, count, pred, band, float(q), keys.bound)


def _trace_bound(name: str, cfg, only: bool) -> dict | None:
    """A bound computed over trace windows (``kind: bound``, ``trace_only``): its ``compute`` (taking a window's jobs)
    and CP-SAT seconds per window, checked; None for any other method."""
    if cfg.get("kind") != "bound" or not only:
        return None
    limit = cfg.get("time_limit_s")
    if isinstance(limit, bool) or not isinstance(limit, (int, float)) or not limit > 0:
        raise ConfigError(f"method {name!r}: time_limit_s must be a positive number of seconds, got {limit!r}")
    return {"compute": str(cfg.get("compute")), "time_limit_s": float(limit)}


@dataclass(frozen=True)
class Method:
    """What the registry knows of one method (see the module docstring for each field)."""

    name: str
    kind: str
    learned: bool
    bound: bool
    colour: str | None
    marker: str | None
    order: float | None
    lists: tuple[str, ...]
    teacher: bool
    validation_baseline: bool
    experiment: bool
    trained_rank: float | None = None
    trained_when: dict = field(default_factory=dict)
    compute: str | None = None
    trace: TraceKeys = field(default_factory=TraceKeys)


def is_learned(cfg) -> bool:
    """A learned policy: its allocator loads trained weights (``ckpt_path`` / ``checkpoints``, or a mara.mat target)."""
    target = str((cfg.get("allocator") or {}).get("_target_", ""))
    return cfg.get("kind") == "policy" and (
        "ckpt_path" in cfg or "checkpoints" in cfg or target.startswith("mara.mat.")
    )


def _entry(name: str) -> Method:
    cfg = method_yaml(name)
    kind = cfg.get("kind")
    if kind not in ("policy", "bound"):
        raise ConfigError(f"method {name!r}: kind must be 'policy' or 'bound', got {kind!r}")
    report = cfg.get("report") or {}
    lists = tuple(str(x) for x in (cfg.get("lists") or []))
    unknown = [x for x in lists if x not in LISTS]
    if unknown:
        raise ConfigError(f"method {name!r}: lists {unknown} unknown; a method joins any of {', '.join(LISTS)}")
    pred = cfg.get("predictor")
    privileged = isinstance(pred, str) and getattr(predictor_entry(pred, missing_ok=True), "privileged", False)
    bound = kind == "bound" or bool(cfg.get("bound", False))
    if privileged and not bound:
        raise ConfigError(
            f"method {name!r}: predictor {pred!r} reads the task's own curve, so the method is a bound: say bound: true"
        )
    if kind == "bound" and not cfg.get("compute"):
        raise ConfigError(f"method {name!r}: a bound names the function that computes it (compute: module.function)")
    trained = cfg.get("trained_as")
    path = method_files()[name]
    return Method(
        name=name,
        kind=kind,
        learned=is_learned(cfg),
        bound=bound,
        colour=report.get("colour"),
        marker=report.get("marker"),
        order=None if report.get("order") is None else float(report.order),
        lists=lists,
        teacher=bool(cfg.get("teacher", False)),
        validation_baseline=bool(cfg.get("validation_baseline", False)),
        experiment=path.parent.parent.resolve() == (CONF_DIR / EXPERIMENTS).resolve(),
        trained_rank=None if trained is None else float(trained.get("rank", 0)),
        trained_when={}
        if trained is None
        else dict(OmegaConf.to_container(trained.when) if trained.get("when") else {}),
        compute=cfg.get("compute"),
        trace=trace_keys(name, cfg),
    )


@lru_cache(maxsize=8)
def _methods(key: tuple) -> dict[str, Method]:
    return {name: _entry(name) for name in sorted(method_files())}


def methods() -> dict[str, Method]:
    """{name: Method} of every registered method (read once per set of config files)."""
    files = method_files()
    return _methods(tuple((n, str(p), p.stat().st_mtime_ns) for n, p in sorted(files.items())))


def method(name: str) -> Method:
    """The registry entry of one method: one-line ConfigError for an unknown name."""
    known = methods()
    if name not in known:
        raise ConfigError(f"unknown method {name!r}; available: {', '.join(known)}")
    return known[name]


def default_methods(which: str) -> list[str]:
    """The methods that join the default list ``which`` (``train``, ``evaluate``), in report order."""
    if which not in LISTS:
        raise ConfigError(f"no default method list {which!r}; the lists are {', '.join(LISTS)}")
    return [m.name for m in sorted(methods().values(), key=_place) if which in m.lists]


def _place(m: Method) -> tuple:
    return (m.order if m.order is not None else float("inf"), m.name)


def report_order() -> list[str]:
    """The methods with a ``report.order``, in that order (tables list them so; the others after, by name)."""
    return [m.name for m in sorted(methods().values(), key=_place) if m.order is not None]


def bound_methods() -> tuple[str, ...]:
    """The bounds (``kind: bound`` and the privileged policies): never "the best rule", dashed in figures."""
    return tuple(m.name for m in methods().values() if m.bound)


def trace_methods() -> tuple[str, ...]:
    """The methods with a trace scheduler (``trace_scheduler``) or a bound over trace windows: what a trace run may
    list."""
    return tuple(m.name for m in methods().values() if m.trace.scheduler is not None or m.trace.bound is not None)


def learned_methods() -> tuple[str, ...]:
    return tuple(m.name for m in methods().values() if m.learned)


def teachers() -> tuple[str, ...]:
    return tuple(m.name for m in methods().values() if m.teacher)


def validation_baselines() -> tuple[str, ...]:
    return tuple(m.name for m in methods().values() if m.validation_baseline)


def _matches(want, have) -> bool:
    if want is True:
        return bool(have)
    if want is False:
        return not have
    return want == have


def _dotted(record: dict, key: str):
    node = record
    for part in str(key).split("."):
        if not isinstance(node, dict) or part not in node:
            return None
        node = node[part]
    return node


def trained_method(record: dict) -> str:
    """The name of the learned method a policy trained so is: ``record`` holds ``reward``, ``predictor`` (the kind's
    name) and the MAT recipe's keys; the matching ``trained_as`` of lowest rank wins. ConfigError if none matches."""
    ranked = sorted(
        (m for m in methods().values() if m.trained_rank is not None), key=lambda m: (m.trained_rank, m.name)
    )
    for m in ranked:
        if all(_matches(want, _dotted(record, key)) for key, want in m.trained_when.items()):
            return m.name
    raise ConfigError("no registered learned method matches this policy's training (trained_as in conf/method)")


# --------------------------------------------------------------------------------------------------- predictors
@dataclass(frozen=True)
class PredictorKind:
    """What the registry knows of one predictor kind (``conf/predictor/<kind>.yaml``'s ``registry`` block)."""

    name: str
    builder: str
    checkpoint_kind: str | None
    checkpoint_loader: str | None
    checkpoint_holds: str | None
    trainer: str | None
    pipeline: bool
    privileged: bool
    settings: str | None = None
    traces: bool = False


def predictor_file(name: str) -> Path | None:
    """``predictor/<name>.yaml`` in the config folders, or None."""
    return find_conf("predictor", f"{name}.yaml")


@lru_cache(maxsize=64)
def _kind(path: str, mtime: int) -> PredictorKind | None:
    cfg = OmegaConf.load(path)
    reg = cfg.get("registry")
    if reg is None or cfg.get("name") != Path(path).stem:
        return None
    if not reg.get("builder"):
        raise ConfigError(f"predictor {cfg.name!r}: registry.builder (a class with from_config) is required ({path})")
    ck = reg.get("checkpoint") or {}
    return PredictorKind(
        name=str(cfg.name),
        builder=str(reg.builder),
        checkpoint_kind=ck.get("kind"),
        checkpoint_loader=ck.get("loader"),
        checkpoint_holds=ck.get("holds"),
        trainer=reg.get("trainer"),
        pipeline=bool(reg.get("pipeline", False)),
        privileged=bool(reg.get("privileged", False)),
        settings=reg.get("settings"),
        traces=bool(reg.get("traces", False)),
    )


def predictor_yaml(name: str):
    """``predictor/<name>.yaml`` of the config folders as a config (a bare ``{name}`` for a predictor without a file;
    ``name`` filled in when the file does not say it)."""
    path = predictor_file(name)
    cfg = OmegaConf.load(path) if path is not None else OmegaConf.create({"name": name})
    if "name" not in cfg:
        cfg.name = name
    return cfg


def as_config(spec):
    """A predictor spec given as a mapping, as a config (an OmegaConf config is returned as it is)."""
    return spec if OmegaConf.is_config(spec) else OmegaConf.create(dict(spec))


def predictor_entry(name: str, missing_ok: bool = False) -> PredictorKind | None:
    """The registered kind a predictor config name refers to (a variant, ``qr_q``, refers to its ``name``'s kind)."""
    path = predictor_file(str(name))
    entry = None
    if path is not None:
        entry = _kind(str(path), path.stat().st_mtime_ns)
        kind = None if entry is not None else OmegaConf.load(path).get("name")
        if kind and kind != name:
            entry = predictor_entry(str(kind), missing_ok=True)
    if entry is None and not missing_ok:
        raise ConfigError(
            f"predictor kind {name!r} is not registered (a conf/predictor/<kind>.yaml with a registry "
            f"block); known: {', '.join(predictor_kinds())}"
        )
    return entry


def predictor_kinds() -> list[str]:
    """The names of every registered predictor kind."""
    names = sorted({p.stem for folder in conf_dirs() for p in (folder / "predictor").glob("*.yaml")})
    return [
        n
        for n in names
        if predictor_entry(n, missing_ok=True) is not None and predictor_entry(n, missing_ok=True).name == n
    ]


def privileged_predictors() -> tuple[str, ...]:
    """Predictor config names (kinds and variants) that read the task's own curve."""
    names = sorted({p.stem for folder in conf_dirs() for p in (folder / "predictor").glob("*.yaml")})
    return tuple(n for n in names if (e := predictor_entry(n, missing_ok=True)) is not None and e.privileged)


def trace_predictors() -> tuple[str, ...]:
    """The predictor kinds whose estimates can be read on trace jobs (``traces: true``): a trace rule's or MARA's
    trace policy's ``predicted`` count may plan on them."""
    return tuple(n for n in predictor_kinds() if predictor_entry(n).traces)


def checkpoint_kinds() -> dict[str, str]:
    """{the ``kind`` field a checkpoint records: what it is in words}: the MAT policy and every predictor's."""
    kinds = {"policy": "a MAT policy checkpoint"}
    for name in predictor_kinds():
        e = predictor_entry(name)
        if e.checkpoint_kind:
            kinds.setdefault(e.checkpoint_kind, e.checkpoint_holds or f"a {e.checkpoint_kind} checkpoint")
    return kinds


def method_list_resolver(which: str) -> list[str]:
    """``${mara.methods:train}`` in a config: the default list ``which``."""
    return default_methods(str(which))


def register_resolvers() -> None:
    """Register ``mara.methods`` (the configs' default method lists read the registry) and ``mara.searchpath`` (the
    experiments folder and ``MARA_CONF_PATH``'s on Hydra's search path) with OmegaConf, once."""
    if not OmegaConf.has_resolver("mara.methods"):
        OmegaConf.register_new_resolver("mara.methods", method_list_resolver)
    if not OmegaConf.has_resolver("mara.searchpath"):
        OmegaConf.register_new_resolver("mara.searchpath", search_path)
