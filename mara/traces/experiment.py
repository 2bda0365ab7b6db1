"""The trace experiment's two kinds of jobs behind one check and one run: jobs that declare their work
(``trace.jobs=iterations``, mara/traces/run.py) and jobs that declare a target loss (``trace.jobs=target_loss``,
mara/traces/target_run.py)."""

from __future__ import annotations

from pathlib import Path

from omegaconf import DictConfig

from mara.core.config import ConfigError, load_method_cfg, plain_config
from mara.traces.run import check_trace_run, run_trace, trace_settings
from mara.traces.target_run import check_target_loss_run, run_target_loss


def check_trace_experiment(cfg: DictConfig):
    """Everything a trace run of either kind reads, checked before any work: (settings, trace, methods, windows)."""
    ts, trace, methods, windows = check_trace_run(cfg)
    if ts.jobs == "target_loss":
        check_target_loss_run(cfg, trace)
    else:  # a method that plans on estimates from the loss prefix has no prefix to read on iteration-count jobs
        over = plain_config(cfg.get("method_overrides")) or {}
        for m, _ in methods:
            if load_method_cfg(m, over.get(m)).get("trace_count") == "predicted":
                raise ConfigError(
                    f"method {m!r} plans on estimates from each job's loss prefix: run it with "
                    f"trace.jobs=target_loss (docs/traces-target-loss.md)"
                )
    return ts, trace, methods, windows


def run_trace_experiment(cfg: DictConfig, out: Path, log=print) -> dict:
    """Every method on every window of the configured trace, for the configured kind of jobs."""
    if trace_settings(cfg).jobs == "target_loss":
        return run_target_loss(cfg, out, log)
    return run_trace(cfg, out, log)
