"""One scheduler interface over one view of jobs and cluster: schedulers decide, engines apply.

**The view** (``JobsView``) is what a scheduler may read, never write: per job its arrival (``arrival_rank``: the
arrival order, ties broken by admission), its ``deadline``, whether it is live (``present``: admitted, not ended),
the GPU counts it may run on (``levels`` and its largest allowed one, ``max_level``), its measured speed per level,
its remaining work and current allocation; of the cluster its GPUs (``n_gpus``) and their speeds. Two engines hold
it in their own layout:

* the batched simulator of the paper's protocol (``mara.sim.env.Observation``): ``[E, K]`` arrays, episodes ×
  active slots, every task on one node (``levels == (1,)``: one GPU per task is the special case of elastic levels,
  the GPUs are the nodes);
* the event-driven trace simulator (``mara.traces.replay.JobState``): ``[J]`` arrays over a trace's jobs, a job on
  any measured level (1, 2, 4, ... GPUs).

**The decision** (``Decision``) is what a scheduler returns at a trace decision: who is admitted or declined, GPUs
per job (0: waits or is preempted), optionally the job's planned finish, end event, set-up seconds and placement, the
jobs whose own clock has ended them (the rigid peers keep one, as their papers' simulators do) and when it wants to
decide again. The engine applies it: only the engine changes job state. In the batched simulator the decision is
the allocator protocol's ``actions [E, M]`` (a slot or idle per node), so that engine stays vectorised over
``[E, K]``.

**The split.** A scheduler is one object with one call per decision, because the schedulers that matter couple the
steps: ElasticFlow admits a job only if its planned allocation meets every deadline, MARA's policy sizes jobs from
the order it scores. Rules that do separate them share the separate steps instead (``mara.sched.sizing``): an
*order* (a priority key per job, ``PriorityRule.keys`` in ``mara.allocators.rules``), then *sizing and placement*
(greedy levels on a GPU pool; the paper's placement on unequal nodes), with admission of every arrival. A new rule
of that kind writes only its key; one of the other kind writes ``decide``.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field
from typing import Protocol, runtime_checkable

import numpy as np

NEVER = math.inf
LEVELS = np.array([1, 2, 4, 8, 16, 32, 64], dtype=np.int64)  # GPU counts a job may run on (the paper's: 1 only)
_NONE = np.empty(0, dtype=np.int64)


@runtime_checkable
class JobsView(Protocol):
    """What every engine shows a scheduler (arrays ``[E, K]`` in the batched engine, ``[J]`` on a trace). Beyond these
    the trace engine's view (``JobState``) has ``levels`` / ``max_level`` (allowed GPU counts), ``tput`` (measured
    speed per level), ``iter_left`` (work left), ``gpus`` (current allocation), ``status``, ``n_gpus`` and
    ``gpu_speed``; the batched engine's (``Observation``) has the processed batches, the predictor's band
    (``pred_remaining``, ``_lo``, ``_hi``), the generation cap and the nodes' speeds and set-up state."""

    arrival_rank: np.ndarray  # arrival order (ties: admission order)
    deadline: np.ndarray  # the job's deadline (steps or seconds: the engine's clock)
    present: np.ndarray  # bool: admitted and not ended


@dataclass
class Decision:
    """One trace decision (arrays over ``jobs``, ``[n]``); the engine applies it (``mara.traces.replay.apply``).

    ``finish`` None: the engine plans the finish of a job given GPUs from its speed there (``planned_finish``) and
    keeps the others'; a NaN entry keeps that job's finish; ``end`` None: a job given GPUs ends at its finish, the
    others have no end event; ``overhead`` / ``gpu_of`` None: unchanged."""

    jobs: np.ndarray = field(default_factory=lambda: _NONE)  # [n] job ids whose allocation this sets
    gpus: np.ndarray = field(default_factory=lambda: _NONE)  # [n] GPUs of each (a level; 0: waits or preempted)
    finish: np.ndarray | None = None  # [n] planned finish (the time the deadline test reads)
    end: np.ndarray | None = None  # [n] time of the job's end event (NEVER: none)
    overhead: np.ndarray | None = None  # [n] set-up seconds charged to the job's next progress
    gpu_of: np.ndarray | None = None  # [n] the GPU a one-GPU job is placed on (-1: not placed)
    admit: np.ndarray = field(default_factory=lambda: _NONE)  # arrivals admitted (they wait until given GPUs)
    decline: np.ndarray = field(default_factory=lambda: _NONE)  # arrivals turned away
    leave: np.ndarray = field(default_factory=lambda: _NONE)  # jobs the scheduler's own clock ends now
    leave_finish: np.ndarray = field(default_factory=lambda: _NONE)  # [len(leave)] their finish times
    placed: np.ndarray = field(default_factory=lambda: _NONE)  # jobs placed now, counted started with GPUs or not
    replan_at: float | None = None  # the next decision it asks for (None: at the engine's next event)
    work_events: bool = False  # jobs stop at a target: the next time a job with GPUs runs out of work is a decision
    unplanned: bool = False  # the scheduler cannot plan finishes (its counts are estimates): live jobs get none


@runtime_checkable
class Scheduler(Protocol):
    """A trace scheduler: ``start`` at a replay's beginning, then one ``decide`` per decision."""

    name: str
    caps: str  # GPU cap per job: "table" (its largest measured level), "trace" (its trace row's num_gpu), ...
    # optional ``own_clock = True``: the scheduler ends its jobs itself by its own clock (``Decision.leave``), so the
    # engine counts no iterations for them (the rigid peers, whose papers' simulators count seconds run)

    def start(self, view) -> None:
        """A new replay over the jobs of ``view`` (read-only)."""

    def decide(self, now: int, arrivals: np.ndarray) -> Decision:
        """The decision at time ``now``; ``arrivals`` [A] the jobs submitted since the last decision."""


def planned_finish(now, left: np.ndarray, speed: np.ndarray, overhead=0.0) -> np.ndarray:
    """ceil(now + set-up + work left / speed), NEVER where the speed is 0: a job's finish if it keeps its GPUs."""
    with np.errstate(divide="ignore", invalid="ignore"):
        return np.where(speed > 0, np.ceil(now + overhead + np.maximum(left, 0.0) / speed), NEVER)
