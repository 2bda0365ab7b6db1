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
        top = LEVELS[np.minimum(s.max_level[order], LEVELS.searchsorted(s.n_gpus, side="right") - 1)]
        gpus = np.zeros(order.size, dtype=np.int64)
        for i in range(order.size):
            if free == 0:
                break
            want = int(top[i])
            g = want if free >= want else int(LEVELS[LEVELS.searchsorted(free, side="right") - 1])
            gpus[i] = g
            free -= g
        s.gpus[order] = gpus
        given = gpus > 0
        on = order[given]
        off = order[~given]
        sp = s.tput[on, LEVELS.searchsorted(gpus[given])]
        left = np.maximum(s.iter_left[on], 0.0)
        with np.errstate(divide="ignore", invalid="ignore"):
            s.finish[on] = np.where(sp > 0, np.ceil(now + left / sp), NEVER)
        s.end_event[on] = s.finish[on]
        start = on[s.status[on] == PENDING]
        s.status[start] = RUNNING
        s.started[start] = now
        s.end_event[off] = NEVER  # preempted: its end moves to when it runs again
