"""A user's job file: their own training runs, each a LightningModule + LightningDataModule, for MARA to schedule.

Schema (YAML; the same dicts as a Python list through ``mara.live.schedule.schedule``)::

    step_seconds: 2.0            # optional: wall-clock seconds of one scheduler step, to turn minutes into steps
                                 # (default: measured before the run, the slowest job's batch time on this machine)
    jobs:
      - name: digits_mlp         # unique; names the job in errors, outcomes and curves
        module: {_target_: pkg.mod.MyModule, hidden: 64}    # a LightningModule and its init arguments
        data: {_target_: pkg.mod.MyData, batch_size: 32}    # a LightningDataModule and its init arguments
        target: {loss: 0.5}      # success: the running mean training loss L(s) reaches this (paper §3), or
                                 # {metric: val/acc, mode: max, value: 0.9, loss: 0.5, every: 10}: success when the
                                 # metric validation_step logs reaches value (max: >=, min: <=), judged every `every`
                                 # batches (default sim.obs_every); the scheduler still plans with loss as its ε
        deadline: {steps: 60}    # scheduler steps after arrival, or {minutes: 3} (x 60 / step_seconds, rounded up)
        arrival: start           # start (step 0) or a step >= 0
        family: null             # optional family hint for the predictor and the curve bank (default: custom)
        seed: 0                  # optional: initialisation and data order (default: the job's index)
        max_batches: null        # optional: the job's batch cap (default: deadline steps x the fastest node's speed)

Every mistake is a ``ConfigError`` naming the job and the field, raised before any training. A job file is code: it
names classes to import and run, like a Python script. ``mara.live.jobs`` first imports every job's classes and checks,
calling nothing, that each is a LightningModule / LightningDataModule subclass (``target_class``); then ``check_job``
builds every job once and runs one ``training_step`` (no optimiser step) to see it returns a finite scalar loss, and
for a metric target one ``validation_step`` to see it logs the metric.
"""

from __future__ import annotations

import json
import math
from dataclasses import dataclass, replace
from pathlib import Path

from mara.core.config import ConfigError

JOB_FIELDS = {"name", "module", "data", "target", "deadline", "arrival", "family", "seed", "max_batches"}
METRIC_FIELDS = {"metric", "mode", "value", "loss", "every"}
DEFAULT_FAMILY = "custom"


@dataclass(frozen=True)
class UserJob:
    """One job of a job file, checked: import paths with their arguments, ε, deadline steps, arrival step."""

    name: str
    module_target: str
    module_args: dict
    data_target: str
    data_args: dict
    eps: float
    budget: int | None  # deadline in steps after arrival; None until ``with_budget`` converts deadline_minutes
    deadline_minutes: float | None
    arrival: int
    family: str
    seed: int
    max_batches: int | None
    metric: dict | None = None  # a metric target {name, mode, value}; None: success is eps on the training loss
    val_every: int | None = None  # batches between validations of a metric target (None: sim.obs_every)


def _fail(where: str, field: str, msg: str):
    raise ConfigError(f"{where}: {field}: {msg}")


def _target(where: str, field: str, value) -> tuple[str, dict]:
    if not isinstance(value, dict) or not isinstance(value.get("_target_"), str) or not value["_target_"]:
        _fail(where, field, "give {_target_: package.module.Class, <init arguments>}")
    args = {k: v for k, v in value.items() if k != "_target_"}
    try:
        json.dumps(args)
    except TypeError:
        _fail(where, field, "init arguments must be plain values (numbers, strings, lists, mappings)")
    return value["_target_"], args


def _number(where: str, field: str, value, integer: bool = False) -> float:
    if isinstance(value, bool) or not isinstance(value, (int, float)) or (integer and not float(value).is_integer()):
        _fail(where, field, f"must be {'an integer' if integer else 'a number'}, got {value!r}")
    if not math.isfinite(float(value)):
        _fail(where, field, f"must be finite, got {value!r}")
    return float(value)


def parse_job(i: int, raw, step_seconds: float | None, source: str) -> UserJob:
    """Job ``i`` of ``source`` (a dict) -> ``UserJob``; one-line ConfigError naming the job and the field."""
    if not isinstance(raw, dict):
        raise ConfigError(f"{source}: job #{i}: must be a mapping with name, module, data, target, deadline")
    name = raw.get("name")
    where = f"{source}: job {name!r}" if isinstance(name, str) and name else f"{source}: job #{i}"
    if not isinstance(name, str) or not name:
        _fail(where, "name", "missing (a unique non-empty string)")
    unknown = sorted(set(raw) - JOB_FIELDS)
    if unknown:
        _fail(where, unknown[0], f"unknown field (known: {', '.join(sorted(JOB_FIELDS))})")
    for field in ("module", "data", "target", "deadline"):
        if raw.get(field) is None:
            _fail(where, field, "missing")
    module_target, module_args = _target(where, "module", raw["module"])
    data_target, data_args = _target(where, "data", raw["data"])
    eps, metric, every = parse_target(where, raw["target"])
    deadline = raw["deadline"]
    if not isinstance(deadline, dict) or len(deadline) != 1 or next(iter(deadline)) not in ("steps", "minutes"):
        _fail(where, "deadline", "give {steps: N} (scheduler steps after arrival) or {minutes: X}")
    ((unit, amount),) = deadline.items()
    amount = _number(where, f"deadline.{unit}", amount, integer=unit == "steps")
    if amount <= 0:
        _fail(where, f"deadline.{unit}", f"must be > 0, got {deadline[unit]!r}")
    budget, minutes = (int(amount), None) if unit == "steps" else (None, amount)
    arrival = raw.get("arrival", "start")
    if arrival in ("start", None):
        arrival = 0
    else:
        arrival = _number(where, "arrival", arrival, integer=True)
        if arrival < 0:
            _fail(where, "arrival", f"must be 'start' or a step >= 0, got {raw['arrival']!r}")
    family = raw.get("family") or DEFAULT_FAMILY
    if not isinstance(family, str) or len(family) > 32:
        _fail(where, "family", "must be a name of at most 32 characters")
    seed = int(_number(where, "seed", raw["seed"], integer=True)) if raw.get("seed") is not None else i
    cap = raw.get("max_batches")
    if cap is not None:
        cap = int(_number(where, "max_batches", cap, integer=True))
        if cap < 1:
            _fail(where, "max_batches", f"must be >= 1, got {cap}")
    job = UserJob(
        name,
        module_target,
        module_args,
        data_target,
        data_args,
        eps,
        budget,
        minutes,
        int(arrival),
        family,
        seed,
        cap,
        metric,
        every,
    )
    return job if step_seconds is None else with_budget(job, step_seconds)


def parse_target(where: str, target) -> tuple[float, dict | None, int | None]:
    """A job's target -> (ε the scheduler plans with, metric target {name, mode, value} or None, validation period)."""
    if isinstance(target, dict) and set(target) == {"loss"}:
        return _number(where, "target.loss", target["loss"]), None, None
    if not isinstance(target, dict) or "metric" not in target:
        _fail(
            where,
            "target",
            "give {loss: ε} (running mean training loss) or {metric: NAME, mode: max|min, value: V, "
            "loss: ε} (a validation metric)",
        )
    unknown = sorted(set(target) - METRIC_FIELDS)
    if unknown:
        _fail(where, f"target.{unknown[0]}", f"unknown field (known: {', '.join(sorted(METRIC_FIELDS))})")
    name = target["metric"]
    if not isinstance(name, str) or not name:
        _fail(where, "target.metric", "give the name the module's validation_step logs with self.log (e.g. val/acc)")
    if target.get("mode") not in ("max", "min"):
        _fail(
            where,
            "target.mode",
            f"must be max (success at value or above) or min (at value or below), got {target.get('mode')!r}",
        )
    if "value" not in target:
        _fail(where, "target.value", "missing (the metric's value that makes the job successful)")
    value = _number(where, "target.value", target["value"])
    if "loss" not in target:
        _fail(
            where,
            "target.loss",
            "missing: the training-loss ε the scheduler plans with (its predictors forecast "
            "the training loss; the metric decides success)",
        )
    eps = _number(where, "target.loss", target["loss"])
    every = None
    if target.get("every") is not None:
        every = int(_number(where, "target.every", target["every"], integer=True))
        if every < 1:
            _fail(where, "target.every", f"must be >= 1 (batches between validations), got {target['every']!r}")
    return eps, {"name": name, "mode": target["mode"], "value": value}, every


def with_budget(job: UserJob, step_seconds: float) -> UserJob:
    """``job`` with a deadline in minutes turned into scheduler steps (``ceil(60 x minutes / step_seconds)``)."""
    if job.budget is not None:
        return job
    return replace(job, budget=max(1, math.ceil(job.deadline_minutes * 60.0 / step_seconds)))


def parse_jobs(doc, source: str = "jobs") -> list[UserJob]:
    """A job-file document (``{jobs: [...], step_seconds: ...}`` or a bare list of jobs) -> its jobs."""
    if isinstance(doc, list):
        doc = {"jobs": doc}
    if not isinstance(doc, dict) or not isinstance(doc.get("jobs"), list) or not doc["jobs"]:
        raise ConfigError(f"{source}: jobs: give a non-empty list of jobs (name, module, data, target, deadline)")
    unknown = sorted(set(doc) - {"jobs", "step_seconds"})
    if unknown:
        raise ConfigError(f"{source}: {unknown[0]}: unknown top-level field (known: jobs, step_seconds)")
    step_seconds = doc.get("step_seconds")
    if step_seconds is not None:
        step_seconds = _number(source, "step_seconds", step_seconds)
        if step_seconds <= 0:
            raise ConfigError(f"{source}: step_seconds: must be > 0, got {doc['step_seconds']!r}")
    jobs = [parse_job(i, raw, step_seconds, source) for i, raw in enumerate(doc["jobs"])]
    seen = set()
    for job in jobs:
        if job.name in seen:
            raise ConfigError(f"{source}: job {job.name!r}: name: used by two jobs")
        seen.add(job.name)
    return jobs


def resolve(doc, context: dict, source: str):
    """``doc`` with its ``${...}`` interpolations resolved against ``context`` (e.g. ``{"live": cfg.live}``)."""
    from omegaconf import OmegaConf
    from omegaconf.errors import OmegaConfBaseException

    if not isinstance(doc, (dict, list)):
        return doc
    try:
        return OmegaConf.to_container(OmegaConf.create({**context, "_doc": doc})._doc, resolve=True)
    except OmegaConfBaseException as exc:
        raise ConfigError(f"{source}: cannot resolve an interpolation ({str(exc).splitlines()[0]})") from None


def load_jobfile(path, context: dict | None = None) -> list[UserJob]:
    """Read and parse a YAML job file (``${...}`` resolved against ``context``); one-line ConfigError when it is
    missing, not YAML, or wrong."""
    import yaml

    path = Path(path)
    try:
        text = path.read_text()
    except OSError as exc:
        raise ConfigError(f"jobs file {path}: cannot be read ({exc.strerror or type(exc).__name__})") from None
    try:
        doc = yaml.safe_load(text)
    except yaml.YAMLError as exc:
        mark = getattr(exc, "problem_mark", None)
        at = f" at line {mark.line + 1}" if mark is not None else ""
        raise ConfigError(f"jobs file {path}: not valid YAML{at}") from None
    if context is not None:
        doc = resolve(doc, context, f"jobs file {path}")
    return parse_jobs(doc, f"jobs file {path}")
