"""Typed settings of a trace run (``python -m mara.evaluate experiment=trace``), parsed once at the entry point.

``trace_run_settings`` reads the composed config, as plain data (``plain_config``), into a frozen
``TraceRunSettings``: the ``trace.*`` block (``TraceSettings``), the methods with their trace keys after the run's
``method_overrides`` (``TraceMethod``), and whether TensorBoard events are written. Every value is checked there and
a mistake is one ``ConfigError`` line naming the setting: booleans are booleans (``trace.rigid=no`` is refused, never
read as true), numbers are finite and in range, a method is listed once, an override names a listed method. The
replay (mara/traces/run.py, target_run.py) reads only these attributes.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, fields

from mara.core.config import ConfigError, plain_config
from mara.core.registry import TraceKeys, method_yaml, trace_keys, trace_methods
from mara.traces.schema import SHIPPED_SAMPLE, Cluster, parse_cluster

#: the two kinds of trace jobs: told their iteration count, or stopping at a target loss
JOB_KINDS = ("iterations", "target_loss")
SPLITS = ("eval", "val")
#: the largest value an integer setting may take (seconds, jobs, windows: far beyond any trace)
INT_MAX = 2**62


@dataclass(frozen=True)
class TraceSettings:
    """``trace.*`` checked: what a trace run replays and how (conf/experiment/trace.yaml says each)."""

    path: str
    cluster: Cluster
    slot: int = 60
    first_jobs: int | None = None
    window_s: int | None = None
    warmup_s: int = 0
    windows: int = 1
    val_windows: int = 0
    split: str = "eval"
    deadline_factor: float = 1.5
    rigid: bool = False
    overhead: bool = True
    time_limit_s: float | None = None
    jobs: str = "iterations"  # iterations: schedulers told num_iteration | target_loss: jobs stop at a target loss
    target_seed: int = 0
    declare_quantile: float = 0.9  # target_loss: a declared count covers this share of the model's past runs
    estimate_every_s: float = 0.0  # target_loss: a predicted count asks its predictor at most this often


@dataclass(frozen=True)
class TraceMethod:
    """One listed method: its name and its trace keys with the run's overrides laid over them."""

    name: str
    keys: TraceKeys

    @property
    def scheduler(self) -> dict:
        return dict(self.keys.scheduler or {})

    @property
    def bound(self) -> dict | None:
        """A bound over trace windows: ``{compute, time_limit_s}``; None for a scheduler."""
        return self.keys.bound


@dataclass(frozen=True)
class TraceRunSettings:
    """A trace run: what it replays (``trace``), under which methods, and whether it writes TensorBoard events."""

    trace: TraceSettings
    methods: tuple[TraceMethod, ...]
    tensorboard: bool = True
    resume: bool = True  # eval.resume: a listed method replayed in the folder with the same settings is reused


def _int(where: str, v, lo: int, allow_none: bool = False) -> int | None:
    if v is None and allow_none:
        return None
    ok = isinstance(v, int) or (isinstance(v, float) and math.isfinite(v) and v == int(v))
    if isinstance(v, bool) or not ok or not lo <= int(v) <= INT_MAX:
        raise ConfigError(f"{where} must be an integer in [{lo}, 2^62]{' or null' if allow_none else ''}, got {v!r}")
    return int(v)


def _number(where: str, v, lo: float, lo_in: bool, hi: float = math.inf, hi_in: bool = False) -> float:
    ok = isinstance(v, (int, float)) and not isinstance(v, bool) and math.isfinite(v)
    if ok:
        ok = (v >= lo if lo_in else v > lo) and (v <= hi if hi_in else v < hi)
    if not ok:
        span = f"{'[' if lo_in else '('}{lo:g}, {hi:g}{']' if hi_in else ')'}"
        raise ConfigError(f"{where} must be a finite number in {span}, got {v!r}")
    return float(v)


def _bool(where: str, v) -> bool:
    if not isinstance(v, bool):
        raise ConfigError(f"{where} must be true or false, got {v!r}")
    return v


def _choice(where: str, v, choices) -> str:
    if v not in choices:
        raise ConfigError(f"{where} must be one of {', '.join(choices)}, got {v!r}")
    return v


def trace_settings(tc: dict) -> TraceSettings:
    """The ``trace`` block (plain data), checked: one ConfigError line naming the setting."""
    if not isinstance(tc, dict):
        raise ConfigError(f"trace must be a block of settings, got {tc!r}")
    known = {f.name for f in fields(TraceSettings)}
    unknown = sorted(set(tc) - known)
    if unknown:
        raise ConfigError(f"trace.{unknown[0]}: no such setting; trace takes {', '.join(sorted(known))}")
    tl = tc.get("time_limit_s")
    path = tc.get("path") or str(SHIPPED_SAMPLE)
    if not isinstance(path, str):
        raise ConfigError(f"trace.path must be a file name, got {path!r}")
    return TraceSettings(
        path=path,
        cluster=parse_cluster(tc.get("cluster", "n64g8")),
        slot=_int("trace.slot", tc.get("slot", 60), 1),
        first_jobs=_int("trace.first_jobs", tc.get("first_jobs"), 1, True),
        window_s=_int("trace.window_s", tc.get("window_s"), 1, True),
        warmup_s=_int("trace.warmup_s", tc.get("warmup_s", 0), 0),
        windows=_int("trace.windows", tc.get("windows", 1), 1),
        val_windows=_int("trace.val_windows", tc.get("val_windows", 0), 0),
        split=_choice("trace.split", tc.get("split", "eval"), SPLITS),
        deadline_factor=_number("trace.deadline_factor", tc.get("deadline_factor", 1.5), 0, False, 1e6, True),
        rigid=_bool("trace.rigid", tc.get("rigid", False)),
        overhead=_bool("trace.overhead", tc.get("overhead", True)),
        time_limit_s=None if tl is None else _number("trace.time_limit_s", tl, 0, False),
        jobs=_choice("trace.jobs", tc.get("jobs", "iterations"), JOB_KINDS),
        target_seed=_int("trace.target_seed", tc.get("target_seed", 0), 0),
        declare_quantile=_number("trace.declare_quantile", tc.get("declare_quantile", 0.9), 0, False, 1, True),
        estimate_every_s=_number("trace.estimate_every_s", tc.get("estimate_every_s", 0), 0, True),
    )


def trace_method_list(names, overrides) -> tuple[TraceMethod, ...]:
    """``methods`` and ``method_overrides`` (plain data) as TraceMethods: every name a trace scheduler, listed once;
    every override for a listed method and a key its config has."""
    if not isinstance(names, list) or not names:
        raise ConfigError(
            f"methods must name at least one trace scheduler, e.g. 'methods=[EDF,ElasticFlow]', got {names!r}"
        )
    usable = trace_methods()
    for m in names:
        if m not in usable:
            raise ConfigError(f"method {m!r} does not schedule job traces; trace schedulers: {', '.join(usable)}")
    twice = sorted({m for m in names if names.count(m) > 1}, key=names.index)
    if twice:
        raise ConfigError(f"methods names {', '.join(twice)} more than once: name each method once")
    overrides = overrides or {}
    if not isinstance(overrides, dict):
        raise ConfigError(f"method_overrides must map method names to settings, got {overrides!r}")
    for m, over in overrides.items():
        if m not in names:
            raise ConfigError(
                f"method_overrides.{m}: {m!r} is not in methods=[{','.join(names)}]; list it or drop its override"
            )
        if not isinstance(over, dict):
            raise ConfigError(f"method_overrides.{m} must be a mapping of method settings, got {over!r}")
    return tuple(TraceMethod(m, _method_keys(m, overrides.get(m) or {})) for m in names)


def _method_keys(name: str, over: dict) -> TraceKeys:
    """The trace keys of ``name`` with ``over`` laid over its YAML (a trace_scheduler block merged key by key)."""
    base = plain_config(method_yaml(name))
    for key, value in over.items():
        if key not in base:
            raise ConfigError(f"method_overrides.{name}.{key}: {name} has no setting {key!r}")
        if key == "trace_scheduler" and isinstance(value, dict):
            value = {**base[key], **value}
        base[key] = value
    return trace_keys(name, base)


def trace_run_settings(c: dict) -> TraceRunSettings:
    """The one reading of a trace run's config (``c``: the composed config as plain data)."""
    ev = c.get("eval") or {}
    tb = ev.get("tensorboard", True) if isinstance(ev, dict) else True
    resume = ev.get("resume", True) if isinstance(ev, dict) else True
    return TraceRunSettings(
        trace=trace_settings(c.get("trace") or {}),
        methods=trace_method_list(c.get("methods"), c.get("method_overrides")),
        tensorboard=_bool("eval.tensorboard", tb),
        resume=_bool("eval.resume", resume),
    )
