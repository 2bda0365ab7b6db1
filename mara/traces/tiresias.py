"""Tiresias (Gu et al., NSDI 2019), discretised two-dimensional least-attained-service as ElasticFlow's evaluation
runs it (the peer's ``dlas-gpu``): rigid jobs in priority queues by attained GPU service, no view of deadlines.

Written from the paper and from what the ElasticFlow authors' simulator does when run (docs/traces-fidelity.md):
  * **Queues.** An arrival enters the first queue. A job whose attained service (seconds run × its GPUs) reaches a
    queue's limit (``thresholds``: 3,250 and 7,200 GPU-seconds) moves to the back of the next queue, at most one queue
    per decision; there is no promotion back (no starvation rule).
  * **Each decision** walks the queues in order, each in its order: a job runs when its GPUs are still free (later,
    smaller jobs may fill gaps), else it waits or is preempted at no cost; then each queue puts its waiting jobs
    behind its running ones.
  * **Clock.** A job started from waiting loses a set-up overhead from its next progress. Decisions come at
    (coalesced) arrivals, at the earliest end among running jobs (never sooner than a slot: the jobs that end then
    leave together, each finished at its own second), and at the earliest queue limit a running job will cross, as
    the peer's simulator estimates it ((limit - seconds run) / GPUs from now, at least a slot ahead). Every
    ``slot``-th decision restarts every running job (a longer overhead, counted in its end).
"""

from __future__ import annotations

import math

import numpy as np

from mara.sched.interface import Decision
from mara.traces.replay import NEVER, JobState
from mara.traces.rigid import RigidClock, rigid_decision, runnable_arrivals, setup_overhead


class TraceTiresias:
    """Tiresias over a trace's rigid jobs (state ``[J]`` arrays shared with the simulator)."""

    name = "Tiresias"
    caps = "trace"  # rigid: each job on its trace's num_gpu
    own_clock = True  # it ends its jobs by the seconds they have run

    def __init__(self, overhead: bool = True, thresholds: tuple = (3250, 7200)):
        self.overhead = overhead
        self.limits = [int(x) for x in thresholds]

    def start(self, state: JobState) -> None:
        self.s = state
        self.clk = RigidClock(state)
        J = len(state.submit)
        self.queues: list[list[int]] = [[] for _ in range(len(self.limits) + 1)]
        self.qid = np.zeros(J, dtype=np.int64)
        self.attained = np.zeros(J, dtype=np.int64)  # seconds run since entering the queues (service / GPUs)
        self.ran = np.zeros(J, dtype=np.int64)  # seconds run in all
        self.last = np.zeros(J)
        self.ovh = np.zeros(J)
        self.end_time = np.full(J, NEVER)
        self.running = np.zeros(J, dtype=bool)
        self.live: list[int] = []  # waiting + running, biggest first (stable)
        self.end_at, self.ending = NEVER, []
        self.count = 0

    def _overhead(self, j: int, restart: bool) -> float:
        return setup_overhead(int(self.clk.g[j]), self.s.n_gpus, restart) if self.overhead else 0.0

    def decide(self, now: int, arrivals: np.ndarray) -> Decision:
        """Ends, arrivals, service, then GPUs by queue; returns the next end or queue crossing."""
        s, clk, slot = self.s, self.clk, self.s.slot
        leave = self.ending if now == self.end_at else []
        if leave:
            for j in leave:
                self.queues[self.qid[j]].remove(j)
                self.live.remove(j)
                self.running[j] = False
        ok, declined = runnable_arrivals(self.clk, arrivals)
        for j in ok.tolist():
            self.live.append(j)
            self.queues[0].append(j)
        for j in self.live:
            if self.running[j]:
                ran = max(int(now - self.last[j]) - self.ovh[j], 0)
                self.ran[j] = int(self.ran[j] + ran)
                self.attained[j] = int(self.attained[j] + ran)
                self.ovh[j] = 0.0
                q = self.qid[j]
                if q < len(self.limits) and self.attained[j] * clk.g[j] >= self.limits[q]:
                    self.qid[j] = q + 1
                    self.queues[q].remove(j)
                    self.queues[q + 1].append(j)
            self.last[j] = now
        restart = self.count > 0 and self.count % slot == 0
        self.count += 1
        free = s.n_gpus
        start, stop = [], []
        for queue in self.queues:
            for j in queue:
                g = int(clk.g[j])
                if free >= g:
                    if not self.running[j]:
                        start.append(j)
                        self.ovh[j] = self._overhead(j, restart)
                    free -= g
                elif self.running[j]:
                    stop.append(j)
        self.running[stop] = False
        self.running[start] = True
        jobs = np.asarray(start + stop, dtype=np.int64)  # started now, or preempted (waits)
        gpus = np.r_[clk.g[start], np.zeros(len(stop), dtype=np.int64)]
        leave_finish = self.end_time[leave]
        self.live.sort(key=lambda j: -clk.g[j])
        for queue in self.queues:
            queue[:] = [j for j in queue if self.running[j]] + [j for j in queue if not self.running[j]]
        self.end_at, self.ending = NEVER, []
        for j in self.live:
            if not self.running[j]:
                continue
            rest = clk.work[j] - self.ran[j]
            if restart:
                self.ovh[j] = self._overhead(j, True)
                rest += self.ovh[j]
            end = int(now + rest)
            event = max(now + slot, end)
            if event < self.end_at:
                self.end_at, self.ending = event, [j]
                self.end_time[j] = end
            elif event == self.end_at:
                self.ending.append(j)
                self.end_time[j] = end
        jump = NEVER
        for j in self.live:
            q = self.qid[j]
            if self.running[j] and q < len(self.limits):
                jump = min(jump, int(math.ceil((self.limits[q] - self.attained[j]) / clk.g[j]) + now))
        if jump - now < slot:
            jump = now + slot
        nxt = min(self.end_at, jump)
        return rigid_decision(jobs, gpus, leave, leave_finish, ok, declined, None if nxt == NEVER else nxt)
