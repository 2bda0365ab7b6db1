"""The methods a run names: known names, each once, ``method_overrides`` keys of the method's own settings and of the
types they declare, allocator arguments of the allocator's constructor, teachers, live predictors, the engine."""

from __future__ import annotations

import importlib.util
import inspect
from dataclasses import dataclass
from typing import Any, Dict, List, Optional

from omegaconf import DictConfig, ListConfig, OmegaConf

from mara.core.config import ConfigError, available_methods, is_learned, load_method_cfg, plain_config
from mara.core.registry import predictor_file, teachers
from mara.preflight.common import _first_line, _select, closest


@dataclass
class CheckpointEntry:
    """One trained policy of a learned method: ``{train_seed, ckpt_path}``."""

    ckpt_path: str
    train_seed: int = 0


@dataclass
class MethodOverride:
    """Schema of ``method_overrides.<METHOD>``: the settings a method config has, with their types. Which of them a
    given method takes is its own config's keys (``checkpoints`` too for learned methods)."""

    name: Optional[str] = None
    kind: Optional[str] = None
    predictor: Optional[str] = None
    ckpt_path: Optional[str] = None
    checkpoints: Optional[List[CheckpointEntry]] = None
    shipped: Optional[str] = None
    allocator: Optional[Dict[str, Any]] = None
    admission_limit: Optional[bool] = None
    time_limit_s: Optional[float] = None
    workers: Optional[int] = None
    chosen_by: Optional[Dict[str, Any]] = None  # a selection bound's Clairvoyant options (Slack-Truth-chosen)


def check_method_override(name: str, override: dict, predictors) -> None:
    """Every key of ``method_overrides.<name>`` is one the method takes, of the schema's type: one-line ConfigError
    naming the key and the closest valid one."""
    where = f"method_overrides.{name}"
    if not isinstance(override, dict):
        raise ConfigError(f"{where} must be a mapping of method settings, got {override!r}")
    base = load_method_cfg(name)
    allowed = set(base.keys()) | ({"checkpoints", "ckpt_path"} if is_learned(base) else set())
    for key in override:
        if key not in allowed:
            raise ConfigError(
                f"{where}.{key}: {name} has no setting {key!r}{closest(key, allowed)}; "
                f"it takes: {', '.join(sorted(allowed))}"
            )
    try:
        OmegaConf.merge(OmegaConf.structured(MethodOverride), override)
    except Exception as exc:  # omegaconf's ValidationError: the first line says the value and the type
        key = getattr(exc, "full_key", None)
        raise ConfigError(f"{where}{'.' + str(key) if key else ''}: {_first_line(exc)}") from None
    pred = override.get("predictor")
    if pred is not None and pred not in (predictors or {}) and predictor_file(str(pred)) is None:
        raise ConfigError(
            f"{where}.predictor: no predictor {pred!r} is configured{closest(pred, predictors or {})}; "
            f"known: {', '.join(predictors or {}) or 'none'}"
        )
    alloc = override.get("allocator")
    if alloc:
        target = alloc.get("_target_") or (base.get("allocator") or {}).get("_target_")
        _check_allocator_keys(f"{where}.allocator", target, {k: v for k, v in alloc.items() if k != "_target_"})


#: constructor annotations whose values the check can judge (``from __future__ import annotations``: strings)
_SCALAR_TYPES = {"bool": (bool,), "int": (int,), "float": (int, float), "str": (str,), "None": (type(None),)}


def _fits_annotation(value, annotation) -> bool:
    """Whether ``value`` is of a scalar annotation (``bool``, ``int``, ``float``, ``str``, unions with ``None``); any
    other annotation is not judged here (True). A bool is not taken for a number, nor a number for a bool."""
    parts = [a.strip() for a in str(annotation).split("|")]
    if annotation is inspect.Parameter.empty or not all(p in _SCALAR_TYPES for p in parts):
        return True
    if isinstance(value, bool):
        return "bool" in parts
    return any(isinstance(value, t) for p in parts if p != "bool" for t in _SCALAR_TYPES[p])


def _check_allocator_keys(where: str, target, values: dict) -> None:
    """Allocator overrides are constructor arguments of the allocator class, of the scalar type it declares (an
    unknown name or a wrong type would fail, or be taken for something else, only later)."""
    from hydra.utils import get_class

    try:
        params = inspect.signature(get_class(str(target))).parameters
    except Exception as exc:
        raise ConfigError(f"{where}._target_: cannot import {target!r} ({type(exc).__name__})") from None
    if any(p.kind is inspect.Parameter.VAR_KEYWORD for p in params.values()):
        return
    valid = [p for p in params if p != "self"]
    for key, value in values.items():
        if key not in valid:
            raise ConfigError(
                f"{where}.{key}: {str(target).rsplit('.', 1)[-1]} takes no argument {key!r}"
                f"{closest(key, valid)}; it takes: {', '.join(valid)}"
            )
        if not _fits_annotation(value, params[key].annotation):
            raise ConfigError(f"{where}.{key}: expected {params[key].annotation}, got {value!r}")


def check_method_names(names, where: str) -> None:
    """Every name is a ``conf/method/<NAME>.yaml``: one line naming an unknown one and the closest."""
    known = available_methods()
    for m in names:
        if not isinstance(m, str) or m not in known:
            place = "" if where == "methods" else f" in {where}"
            raise ConfigError(f"unknown method {m!r}{place}{closest(m, known)}; available: {', '.join(known)}")


def check_once(names: list, where: str) -> None:
    """Each method is named once: a repeated name would evaluate it again and put its rows twice into results.json."""
    twice = sorted({m for m in names if names.count(m) > 1}, key=names.index)
    if twice:
        raise ConfigError(
            f"{where} names {', '.join(map(str, twice))} more than once: name each method once "
            f"(got {where}=[{','.join(map(str, names))}])"
        )


def check_methods(cfg: DictConfig, need_methods: bool) -> list[str]:
    """``methods`` (a non-empty list of known names when the run evaluates) and ``method_overrides``."""
    methods = cfg.get("methods")
    if methods is None:
        methods = []
    if not isinstance(methods, (list, ListConfig)):
        raise ConfigError(
            f"methods must be a list of method names, e.g. methods=[FIFO,EDF], got {plain_config(methods)!r}"
        )
    methods = list(methods)
    if need_methods and not methods:
        raise ConfigError(f"methods is empty: name at least one method; available: {', '.join(available_methods())}")
    check_method_names(methods, "methods")
    check_once(methods, "methods")
    overrides = plain_config(cfg.get("method_overrides")) or {}
    if not isinstance(overrides, dict):
        raise ConfigError(f"method_overrides must map method names to settings, got {overrides!r}")
    check_method_names(list(overrides), "method_overrides")
    predictors = list((cfg.get("predictors") or {}).keys())
    for name, override in overrides.items():
        check_method_override(name, override or {}, predictors)
    return methods


def check_engine(cfg: DictConfig, methods: list[str]) -> None:
    """On ``sim.engine=replay`` (the trace replay, one episode at a time) every method runs there: a selection bound
    (``chosen_by``: a rule restricted to the Clairvoyant's chosen tasks of the whole stack) runs on ``batched`` only."""
    if (cfg.get("sim") or {}).get("engine", "batched") != "replay":
        return
    overrides = plain_config(cfg.get("method_overrides")) or {}
    for m in methods:
        if load_method_cfg(m, overrides.get(m)).get("chosen_by") is not None:
            raise ConfigError(f"method {m}: chosen_by (a selection bound) runs on sim.engine=batched only")


RAY_HINT = 'pip install -e ".[cluster]"'


def check_live_workers(cfg: DictConfig) -> None:
    """``live.workers=ray`` needs the optional ``ray`` package (the ``cluster`` extra)."""
    if str((cfg.get("live") or {}).get("workers")) == "ray" and importlib.util.find_spec("ray") is None:
        raise ConfigError(f"live.workers=ray needs Ray, which is not installed: {RAY_HINT} (or live.workers=process)")


def check_live_predictors(cfg: DictConfig, methods: list[str]) -> None:
    """A policy method live mode runs reads a predictor live mode configures (``predictors`` of conf/live.yaml): one
    line naming the method and the predictor it would need (MARA-suite's decision head is trained on the zoo bank's
    curves, not on live jobs)."""
    overrides = plain_config(cfg.get("method_overrides")) or {}
    configured = list((cfg.get("predictors") or {}).keys())
    for m in methods:
        mcfg = load_method_cfg(m, overrides.get(m))
        pred = mcfg.get("predictor")
        if mcfg.get("kind") != "policy" or pred is None or not isinstance(pred, str) or pred in configured:
            continue
        raise ConfigError(
            f"{m} reads predictor {pred!r}, which live mode does not configure (live predictors: "
            f"{', '.join(configured) or 'none'}); run {m} in the simulator (python -m mara.evaluate), "
            f"or pick live methods on those predictors, e.g. methods=[MARA,EDF]"
        )


def check_teachers(cfg: DictConfig) -> None:
    """``mat.imitation.teacher`` and every setting's teacher of ``mat.imitation.suite`` are methods registered as
    teachers (``teacher: true`` in their conf/method YAML)."""
    imitation = _select(cfg, "mat.imitation")
    if not isinstance(imitation, DictConfig) or not imitation.get("enabled", False):
        return
    named = [("mat.imitation.teacher", imitation.get("teacher"))]
    named += [
        (f"mat.imitation.suite[{i}].teacher", s.get("teacher"))
        for i, s in enumerate(imitation.get("suite") or [])
        if isinstance(s, DictConfig)
    ]
    allowed = teachers()
    for where, name in named:
        if name is not None and name not in allowed:
            check_method_names([name], where)
            raise ConfigError(
                f"{where}={name} is not a teacher (a rule whose conf/method YAML says teacher: true); "
                f"teachers: {', '.join(allowed)}"
            )
