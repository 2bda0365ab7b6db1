"""Rigid jobs kept by their own scheduler's clock: what the time-sharing schedulers of ElasticFlow's evaluation
(Gandiva, Tiresias, Themis) assume about a job.

A rigid job runs on exactly the GPUs its trace row asks for (``num_gpu``, its one allowed level: throughput cap rule
``"trace"``) or not at all, and its work is the whole seconds it needs there: ceil(iterations / measured speed at
that level), which is the ITP traces' own ``duration`` column on every row of the fidelity cases (the peer's
simulator counts those). These schedulers decide when a job has finished by the seconds it has run (less set-up
overhead), not by the iterations the shared simulator counts, so the policy keeps each job's clock: the simulator's
iteration count is set out of reach (infinite) and the policy ends a job itself (``finish_job``).
"""

from __future__ import annotations

import math

import numpy as np

from mara.traces.replay import DECLINED, DONE, NEVER, JobState
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
        state.iter_left[:] = NEVER  # the simulator's own iteration count never ends these jobs: their clock does


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


def finish_job(state: JobState, j: int, now: int, end_time: float) -> None:
    """Job ``j`` leaves at decision ``now``; ``end_time`` is the finish its deadline is judged by."""
    state.status[j] = DONE
    state.ended[j] = now
    state.gpus[j] = 0
    state.end_event[j] = NEVER
    state.finish[j] = end_time


def runnable_arrivals(state: JobState, clock: RigidClock, arrivals: np.ndarray) -> np.ndarray:
    """The arrivals that can run at their size; one with no measured speed there (e.g. a model whose table stops below
    its GPU count) would hold its GPUs for ever, so it is declined (it misses its deadline)."""
    ok = clock.work[arrivals] < NEVER
    state.status[arrivals[~ok]] = DECLINED
    return arrivals[ok]
