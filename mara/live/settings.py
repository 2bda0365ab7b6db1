"""Typed settings of live mode (``python -m mara.live``), parsed once at the entry point.

``live_settings`` reads the composed config (conf/live.yaml), as plain data, into a frozen ``LiveSettings``: the
``live`` block (``LiveOptions``), the simulator's rules (``sim``, plain data as the simulator takes them), the methods
and their overrides, the run's predictors, the bank, and a job file's settings. Every value is typed there (a
boolean is a boolean: ``live.replay=no`` is refused, never read as true) and a mistake is one ``ConfigError`` line
naming the setting; the ranges are checked by ``mara.live.run.validate`` and ``mara.preflight``. Live mode's modules
read only these attributes.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field, fields

from mara.core.config import ConfigError

ACTIONS = ("run", "export_bank")


@dataclass(frozen=True)
class LiveOptions:
    """The ``live`` block (conf/live.yaml says each)."""

    families: tuple[str, ...]
    load: float
    time_scale: float
    calibration_target: float
    calibration_bank: str | None
    root: int
    episodes: int
    data: str
    data_root: str
    cache_dir: str
    workers: str
    device: str
    threads: int
    ray: dict = field(default_factory=dict)
    replay: bool = True
    progress_every: int = 20
    crash: dict = field(default_factory=dict)  # {job: batch}: that job's worker is killed at that batch (tests)
    policy_ckpt: str | None = None
    figure: bool = True
    tensorboard: bool = True


@dataclass(frozen=True)
class LiveSettings:
    """A live run: what it does (``action``), under which methods, on which simulator rules, jobs and bank."""

    action: str
    methods: tuple[str, ...]
    method_overrides: dict
    sim: dict
    live: LiveOptions
    predictors: dict
    bank_path: str | None = None
    jobs: object = None  # a job-file path, or the jobs themselves (a list, or a mapping with ``jobs``)
    jobs_methods: object = "auto"  # auto | a list of methods
    jobs_bank_split: str = "pool"
    bank_out: str | None = None


def _typed(where: str, v, kind):
    """``v`` of ``kind`` (bool, int, float, str): a bool is never a number, a number never a bool."""
    if kind is bool:
        ok = isinstance(v, bool)
    elif kind is int:
        ok = isinstance(v, int) and not isinstance(v, bool)
    elif kind is float:
        ok = isinstance(v, (int, float)) and not isinstance(v, bool) and math.isfinite(v)
    else:
        ok = isinstance(v, str)
    if not ok:
        what = {bool: "true or false", int: "an integer", float: "a finite number", str: "a string"}[kind]
        raise ConfigError(f"{where} must be {what}, got {v!r}")
    return float(v) if kind is float else v


def live_options(lv: dict) -> LiveOptions:
    """The ``live`` block (plain data), typed: one ConfigError line naming the setting."""
    if not isinstance(lv, dict):
        raise ConfigError(f"live must be a block of settings, got {lv!r}")
    known = {f.name: f for f in fields(LiveOptions)}
    unknown = sorted(set(lv) - set(known))
    if unknown:
        raise ConfigError(f"live.{unknown[0]}: no such setting; live takes {', '.join(sorted(known))}")
    kinds = {"bool": bool, "int": int, "float": float, "str": str}
    out = {}
    for name, value in lv.items():
        kind = kinds.get(str(known[name].type))
        if kind is not None:
            out[name] = _typed(f"live.{name}", value, kind)
        elif name in ("calibration_bank", "policy_ckpt"):
            out[name] = None if value is None else _typed(f"live.{name}", value, str)
        elif name == "families":
            if not isinstance(value, list) or not all(isinstance(f, str) for f in value):
                raise ConfigError(f"live.families must be a list of zoo family names, got {value!r}")
            out[name] = tuple(value)
        else:  # ray, crash: mappings
            if not isinstance(value or {}, dict):
                raise ConfigError(f"live.{name} must be a mapping, got {value!r}")
            out[name] = dict(value or {})
    try:
        out["crash"] = {int(k): int(v) for k, v in out.get("crash", {}).items()}
    except (TypeError, ValueError):
        raise ConfigError(f"live.crash maps job numbers to batch numbers, got {lv.get('crash')!r}") from None
    return LiveOptions(**out)


def live_settings(c: dict) -> LiveSettings:
    """The one reading of a live run's config (``c``: the composed config as plain data)."""
    action = c.get("action", "run")
    if action not in ACTIONS:
        raise ConfigError(f"action must be run or export_bank, got {action!r}")
    methods = c.get("methods") or []
    if not isinstance(methods, list):
        raise ConfigError(f"methods must be a list of method names, e.g. methods=[FIFO,EDF], got {methods!r}")
    overrides, sim = c.get("method_overrides") or {}, c.get("sim") or {}
    if not isinstance(overrides, dict) or not isinstance(sim, dict):
        raise ConfigError("method_overrides and sim must be mappings of settings")
    jobs_methods = c.get("jobs_methods", "auto")
    if jobs_methods != "auto" and not isinstance(jobs_methods, list):
        raise ConfigError(f"jobs_methods must be auto or a list of methods, got {jobs_methods!r}")
    bank_out = c.get("bank_out")
    return LiveSettings(
        action=action,
        methods=tuple(methods),
        method_overrides=overrides,
        sim=sim,
        live=live_options(c.get("live") or {}),
        predictors=c.get("predictors") or {},
        bank_path=(c.get("bank") or {}).get("path"),
        jobs=c.get("jobs"),
        jobs_methods=jobs_methods,
        jobs_bank_split=str(c.get("jobs_bank_split", "pool")),
        bank_out=None if bank_out is None else str(bank_out),
    )
