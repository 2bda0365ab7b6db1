"""Rigid jobs kept by their own scheduler's clock: what the time-sharing schedulers of ElasticFlow's evaluation
(Gandiva, Tiresias, Themis) assume about a job.

A rigid job runs on exactly the GPUs its trace row asks for (``num_gpu``, its one allowed level: throughput cap rule
``"trace"``) or not at all, and its work is the whole seconds it needs there: ceil(iterations / measured speed at
that level), which is the ITP traces' own ``duration`` column on every row of the fidelity cases (the peer's
simulator counts those). These schedulers decide when a job has finished by the seconds it has run (less set-up
overhead), not by the iterations the shared simulator counts, so the policy keeps each job's clock: it says so
(``own_clock``), the simulator then counts no iterations for its jobs, and its decisions end a job (``Decision.leave``).
"""

from __future__ import annotations

import math

import numpy as np

from mara.sched.interface import NEVER, Decision
from mara.traces.replay import JobState
from mara.traces.throughput import LEVELS


class RigidClock:
    """Per-job rigid GPU count ``g [J]``, speed ``speed [J]`` (iters/s there), work ``work [J]`` (seconds there) and
    seconds run so far ``done [J]``."""

    def __init__(self, state: JobState):
        J = len(state.submit)
        self.g = LEVELS[state.max_level].astype(np.int64)
        self.speed = state.tput[np.arange(J), state.max_level]
        ok = self.speed > 0
        self.work = np.where(ok, np.ceil(state.iter_left / np.where(ok, self.speed, 1.0)), NEVER)
        self.iterations = state.iter_left.copy()
        self.done = np.zeros(J)


def setup_overhead(g: int, n_gpus: int, restart: bool = False, cached: bool = False) -> float:
    """Seconds a job on ``g`` GPUs loses when (re)started, as ElasticFlow's simulator charges every scheduler: a base
    (7 s on >= 256 GPUs, else 2 s), plus 2 (log2 g + 1) s unless its GPUs are cached, plus 27 s (47 s on >= 256 GPUs)
    when the round restarts every job."""
    big = n_gpus >= 256
    base = 7.0 if big else 2.0
    if cached:
        return base
    if restart:
        base += 47.0 if big else 27.0
    return base + 2.0 * (math.log2(g) + 1.0)


def runnable_arrivals(clock: RigidClock, arrivals: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """(the arrivals that can run at their size, the others): one with no measured speed there (e.g. a model whose
    table stops below its GPU count) would hold its GPUs for ever, so it is declined (it misses its deadline)."""
    ok = clock.work[arrivals] < NEVER
    return arrivals[ok], arrivals[~ok]


def rigid_decision(jobs, gpus, leave, leave_finish, admit, decline, replan_at, placed=None) -> Decision:
    """A rigid scheduler's decision: ``jobs`` on ``gpus`` (0: waits or is preempted), with no planned finish (the
    scheduler's clock ends them: ``leave`` at ``leave_finish``)."""
    d = Decision(admit=admit, decline=decline, replan_at=replan_at)
    if len(jobs):
        d.jobs, d.gpus = np.asarray(jobs, dtype=np.int64), np.asarray(gpus, dtype=np.int64)
        d.finish = d.end = np.full(d.jobs.size, NEVER)
    if len(leave):
        d.leave, d.leave_finish = np.asarray(leave, dtype=np.int64), np.asarray(leave_finish, dtype=np.float64)
    if placed:
        d.placed = np.asarray(placed, dtype=np.int64)
    return d
