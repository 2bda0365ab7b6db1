"""Priority rules, one class each for every engine: FIFO (earliest arrival first) and EDF (earliest deadline first).

A rule is an order (``keys``: a priority per job over the scheduler view, ``mara.sched.interface.JobsView``) and the
shared steps after it (``mara.sched.sizing``); it admits every arrival and uses no predictor.

* **Batched engine** (``act``, the allocator protocol): the M first present tasks in that order, one node each. On
  heterogeneous nodes / with switch costs they are placed by ``mara.allocators.placement.place`` with the observable
  generation cap as the remaining demand: the earliest-ranked task first, each on the free node where it would
  finish soonest, running tasks kept on their node unless a faster node pays for the set-up. ``choose`` returns the
  order before placement (an imitation label).
* **Trace engine** (``start`` / ``decide``, ``mara.sched.interface.Scheduler``): each decision hands out GPUs afresh
  in that order (``greedy_levels``): a job gets its largest level (``max_level``, at most N) when that many are free,
  else the largest level that fits the GPUs still free, else none (it waits, or is preempted at no cost); its finish
  is planned as ceil(now + iterations left / speed). Jobs already hopeless still run, in order. This is EDF as the
  elastic-scheduling literature runs it (ElasticFlow §6).
* **Live mode** drives the batched engine, so it runs ``act``.

A new rule of this kind is a subclass with a ``name`` and ``keys`` (and one method YAML naming it as ``allocator``
and ``trace_scheduler``).
"""

from __future__ import annotations

import numpy as np

from mara.allocators.placement import place
from mara.sched.interface import NEVER, Decision, planned_finish
from mara.sched.sizing import by_keys, first_by_keys, greedy_levels
from mara.sim.env import Observation


class PriorityRule:
    """Serve jobs in ``keys`` order (most significant first): the engines' shared part of a rule."""

    name = "rule"
    caps = "table"  # trace jobs: GPU cap per job is its largest measured level (at most its batch size)

    def keys(self, view) -> tuple:
        """Priority keys over the view's jobs, most significant first (smaller first), ending in a key that leaves no
        tie (e.g. ``arrival_rank``)."""
        raise NotImplementedError

    # the batched engine
    def reset(self, n_episodes: int) -> None:
        pass

    def choose(self, obs: Observation) -> tuple[np.ndarray, np.ndarray]:
        """(picks [E, M] in priority order, remaining demand for the placement)."""
        return first_by_keys(self.keys(obs), obs.present, obs.n_nodes), obs.cap_remaining if getattr(
            obs, "hetero", False
        ) else None

    def act(self, obs: Observation) -> np.ndarray:
        return place(obs, *self.choose(obs))

    # the trace engine
    def start(self, view) -> None:
        self.view = view

    def decide(self, now: int, arrivals: np.ndarray) -> Decision:
        """Admit ``arrivals``, give GPUs in priority order; no re-plan time (the rule re-plans at events)."""
        v = self.view
        live = v.present
        live[arrivals] = True
        order = by_keys(self.keys(v), np.flatnonzero(live))
        gpus = greedy_levels(v.levels[v.max_level[order]], v.levels, v.n_gpus)
        on = gpus > 0
        finish = np.full(order.size, np.nan)
        finish[on] = planned_finish(now, v.iter_left[order[on]], v.tput[order[on], v.levels.searchsorted(gpus[on])])
        return Decision(jobs=order, gpus=gpus, finish=finish, end=np.where(on, finish, NEVER), admit=arrivals)


class FIFO(PriorityRule):
    """Serve the earliest-arrived jobs (ties: admission order)."""

    name = "FIFO"

    def keys(self, view) -> tuple:
        return (view.arrival_rank,)


class EDF(PriorityRule):
    """Serve the jobs with the earliest deadlines (ties: earlier arrival)."""

    name = "EDF"

    def keys(self, view) -> tuple:
        return (view.deadline, view.arrival_rank)
