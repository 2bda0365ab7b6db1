"""The trace experiment's two kinds of jobs behind one run: jobs that declare their work (``trace.jobs=iterations``,
mara/traces/run.py) and jobs that declare a target loss (``trace.jobs=target_loss``, mara/traces/target_run.py).
The settings arrive parsed (``TraceRunSettings``, mara/traces/settings.py) and checked (mara/preflight/traces.py)."""

from __future__ import annotations

from pathlib import Path

from mara.core.config import ConfigError
from mara.traces.run import run_trace
from mara.traces.settings import TraceRunSettings
from mara.traces.target_run import run_target_loss


def check_job_kind(run: TraceRunSettings) -> None:
    """A method that plans on estimates from the loss prefix has no prefix to read on iteration-count jobs."""
    if run.trace.jobs == "target_loss":
        return
    for m in run.methods:
        if m.keys.count == "predicted":
            raise ConfigError(
                f"method {m.name!r} plans on estimates from each job's loss prefix: run it with "
                f"trace.jobs=target_loss (docs/traces-target-loss.md)"
            )


def run_trace_experiment(run: TraceRunSettings, out: Path, log=print, bank=None) -> dict:
    """Every method on every window of the configured trace, for the configured kind of jobs (``bank``: the curve
    bank of target-loss jobs, read before any work; None: the default bank)."""
    if run.trace.jobs == "target_loss":
        return run_target_loss(run, out, log, bank=bank)
    return run_trace(run, out, log)
