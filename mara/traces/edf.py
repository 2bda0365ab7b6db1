"""Earliest deadline first on a GPU pool, as the elastic-scheduling literature runs it (ElasticFlow §6).

No admission control: every arrival waits for GPUs. Each decision hands out GPUs afresh in deadline order (ties by
arrival): a job gets its largest level (``max_level``, at most N) when that many are free, else the largest level
that fits the GPUs still free, else none (it waits, or is preempted at no cost). Its finish is planned as
ceil(now + iterations left / speed). Jobs already hopeless still run, in deadline order.
"""

from __future__ import annotations

import numpy as np

from mara.traces.replay import NEVER, PENDING, RUNNING, JobState
from mara.traces.throughput import LEVELS


class TraceEDF:
    """EDF over a trace's jobs (state ``[J]`` arrays shared with the simulator)."""

    name = "EDF"
    caps = "table"  # GPU cap per job: its largest measured level (at most its batch size)

    def reset(self, state: JobState) -> None:
        self.s = state

    def decide(self, now: int, arrivals: np.ndarray):
        """Admit ``arrivals``, give GPUs in deadline order; returns no re-plan time (EDF re-plans at events)."""
        s = self.s
        s.status[arrivals] = PENDING
        live = np.flatnonzero((s.status == PENDING) | (s.status == RUNNING))
        order = live[np.lexsort((live, s.ddl[live]))]
        free = s.n_gpus
        head = order[: s.n_gpus]  # each job served takes a GPU at least: no more than N are served
        top = LEVELS[np.minimum(s.max_level[head], LEVELS.searchsorted(s.n_gpus, side="right") - 1)]
        gpus = np.zeros(order.size, dtype=np.int64)
        fit = LEVELS.tolist()
        for i, want in enumerate(top.tolist()):  # in deadline order: its largest level, else the largest that fits
            if free == 0:
                break
            g = want if free >= want else max(lv for lv in fit if lv <= free)
            gpus[i] = g
            free -= g
        s.gpus[order] = gpus
        on = order[gpus > 0]
        off = order[gpus == 0]
        sp = s.tput[on, LEVELS.searchsorted(s.gpus[on])]
        with np.errstate(divide="ignore", invalid="ignore"):
            s.finish[on] = np.where(sp > 0, np.ceil(now + np.maximum(s.iter_left[on], 0.0) / sp), NEVER)
        s.end_event[on] = s.finish[on]
        start = on[s.status[on] == PENDING]
        s.status[start] = RUNNING
        s.started[start] = now
        s.end_event[off] = NEVER  # preempted: its end moves to when it runs again
