"""The ``trace_mara`` block of a composed ``train`` config read into checked ``TracePolicySettings``.

``experiment=trace_mara`` trains MARA's trace policy (mara/mat/trace_train.py) from this block instead of the
stages: every count, share and rate is checked and every window spec's trace read and cut before any work
(one ``ConfigError`` line).
"""

from __future__ import annotations

from dataclasses import fields

from omegaconf import DictConfig

from mara.core import registry
from mara.core.config import ConfigError, plain_config
from mara.eval.settings import check_number
from mara.mat.trace_settings import WARMUP_DAYS, TracePolicySettings, TraceWindowSpec
from mara.mat.trace_train import trace_windows
from mara.traces.schema import SCHEMAS
from mara.traces.target_run import BANDS

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
    path, (trace, _), _ = trace_windows(out, where)  # a missing trace or a spec no window fits stops here
    if not SCHEMAS[trace.schema].per_model:  # the policy trains on target-loss jobs: each needs a model and iterations
        raise ConfigError(
            f"trace_mara.{where}: {path} is in the {trace.schema} schema; the trace policy trains on target-loss "
            f"jobs, which need the elasticflow schema (model_name, num_iteration)"
        )
    return out
