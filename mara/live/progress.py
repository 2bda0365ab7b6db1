"""What a live run reports as it goes: the progress line of a scheduler step, the step's TensorBoard scalars and the
worker failures of a finished run, the same for the zoo workload (mara/live/run.py) and a job file
(mara/live/jobs.py)."""

from __future__ import annotations

import time
from pathlib import Path

from mara.live.report import say


def tensorboard_writer(enabled: bool, out: Path):
    """A TensorBoard writer into ``out/tensorboard`` (None when not ``enabled``)."""
    if not enabled:
        return None
    from torch.utils.tensorboard import SummaryWriter

    return SummaryWriter(str(out / "tensorboard"))


def step_reporter(tag: str, every: int, tb=None, scalars: str | None = None):
    """``progress(env, src)`` for :func:`mara.live.driver.run_live`: a line every ``every`` steps and at the end,
    prefixed ``[tag]``, and with ``tb`` the step's queue counts under ``scalars``/ in TensorBoard."""
    t0 = time.perf_counter()

    def progress(env, src):
        if tb is not None:
            tb.add_scalar(f"{scalars}/active", int(env.n_active[0]), env.t)
            tb.add_scalar(f"{scalars}/queued", int(env.n_queued[0]), env.t)
            tb.add_scalar(f"{scalars}/succeeded", int(env.succeeded[0]), env.t)
            tb.add_scalar(f"{scalars}/failed", int(env.failed[0]), env.t)
        if env.t % every == 0 or env.done.all():
            say(
                f"[{tag}] step {env.t:4d}  active {int(env.n_active[0])}  queued {int(env.n_queued[0])}  "
                f"succeeded {int(env.succeeded[0])}  failed {int(env.failed[0])}  batches {src.n_batches}  "
                f"{time.perf_counter() - t0:6.1f} s"
            )

    return progress


def say_worker_failures(where: str, failures: list[dict], job_name=lambda j: j) -> None:
    """One line per worker failure of a run (``where``: the method and episode; the job is marked failed)."""
    for f in failures:
        say(f"worker failure: {where}: job {job_name(f['job'])} at step {f['step']}: {f['error']} (job marked failed)")
