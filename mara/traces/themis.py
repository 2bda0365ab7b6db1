"""Themis (Mahajan et al., NSDI 2020), finish-time fairness, as ElasticFlow's evaluation runs it: every lease the
live rigid jobs get shares that minimise the worst finish-time fairness, and the GPUs go to the largest shares.

Written from the paper and from what the ElasticFlow authors' simulator does when run (docs/traces-fidelity.md):
  * **Leases.** Decisions every ``slot`` s from the first arrival; an arrival waits for the next lease. A job that
    has GPUs runs the whole lease and, when its iterations run out within it, finishes at
    the lease's end.
  * **Finish-time fairness** of job i with share x_i of its GPUs: rho_i = (t - submit_i + iters_i / (speed_i x_i)) /
    (isolated_i + iters_i / iso_i), where t is the last lease at which a job arrived or left, iso_i = min(ceil(N / n)
    / g_i, 1) its fair share of n live jobs, and isolated_i the sum over past leases of its iterations done / that
    lease's iso_i. The shares minimise max_i rho_i subject to sum g_i x_i <= N, 0 <= x_i <= 1 (``fair_shares``).
  * **Auction.** Jobs in order of share, largest first (ties in their previous order), each gets its GPUs while they
    fit (later, smaller jobs may fill gaps).
  * **No set-up overhead**: the peer's simulator charges Themis none in effect (its per-job charge is only made for
    a job that has no overhead entry, and every job is read with one of 0), so a job runs whole leases.
"""

from __future__ import annotations

import math

import numpy as np

from mara.sched.interface import Decision
from mara.traces.replay import FUTURE, JobState
from mara.traces.rigid import RigidClock, rigid_decision, runnable_arrivals


def fair_shares(a: np.ndarray, b: np.ndarray, c: np.ndarray, g: np.ndarray, n_gpus: int) -> np.ndarray:
    """Shares ``x [n]`` minimising max_i (a_i + b_i / x_i) / c_i over sum g_i x_i <= n_gpus, 0 <= x_i <= 1.

    All of ``[n]``, b > 0, c > 0. At the optimum every job gets the least share that keeps its fairness at the optimum
    rho: x_i = b_i / (rho c_i - a_i); rho is the largest full-share fairness when those shares fit, else the rho
    at which they just fill the GPUs (found by bisection). Where the GPUs are not all needed the optimum is not
    unique: the least shares are taken (their order is what the auction reads; the analytic centre of the optimal
    set, where an interior-point solver such as the peer's ends, gave the same outcomes on the fidelity cases)."""
    lo = float(np.max((a + b) / c))

    def need(rho):
        return float(np.sum(g * b / np.maximum(rho * c - a, 1e-300)))

    if need(lo) <= n_gpus:
        return np.minimum(b / np.maximum(lo * c - a, 1e-300), 1.0)
    hi = max(lo * 2.0, 1e-12)
    while need(hi) > n_gpus:
        hi *= 2.0
    for _ in range(200):
        mid = 0.5 * (lo + hi)
        if need(mid) > n_gpus:
            lo = mid
        else:
            hi = mid
        if hi - lo <= 1e-12 * hi:
            break
    return np.minimum(b / np.maximum(hi * c - a, 1e-300), 1.0)


class TraceThemis:
    """Themis over a trace's rigid jobs (state ``[J]`` arrays shared with the simulator)."""

    name = "Themis"
    caps = "trace"  # rigid: each job on its trace's num_gpu
    own_clock = True  # it ends its jobs by the seconds they have run

    def start(self, state: JobState) -> None:
        self.s = state
        self.clk = RigidClock(state)
        J = len(state.submit)
        self.iters = self.clk.iterations.copy()
        self.isolated = np.zeros(J)
        self.prev_iters = np.full(J, np.nan)
        self.prev_iso = np.ones(J)
        self.live: list[int] = []
        self.ending: list[int] = []
        self.end_time = np.zeros(J)
        self.event_t = None

    def decide(self, now: int, arrivals: np.ndarray) -> Decision:
        """One lease: leavers out, arrivals in, shares, auction, the lease's progress; returns the next lease."""
        s, clk, slot = self.s, self.clk, self.s.slot
        if len(arrivals) or self.ending:
            self.event_t = now
        leave = self.ending
        if leave:
            gone = set(leave)
            self.live = [j for j in self.live if j not in gone]
        self.ending = []
        ok, declined = runnable_arrivals(self.clk, arrivals)
        self.live.extend(ok.tolist())
        jobs, gpus = [], []
        if self.live:
            live = np.asarray(self.live, dtype=np.int64)
            g = clk.g[live]
            iso = np.minimum(math.ceil(s.n_gpus / len(live)) / g, 1.0)
            seen = ~np.isnan(self.prev_iters[live])
            self.isolated[live[seen]] += (self.prev_iters[live[seen]] - self.iters[live[seen]]) / self.prev_iso[
                live[seen]
            ]
            self.prev_iters[live] = self.iters[live]
            self.prev_iso[live] = iso
            left = self.iters[live]
            x = fair_shares(
                (self.event_t - s.submit[live]).astype(np.float64),
                left / clk.speed[live],
                self.isolated[live] + left / iso,
                g.astype(np.float64),
                s.n_gpus,
            )
            order = np.argsort(-x, kind="stable")
            live = live[order]
            self.live = live.tolist()
            take = np.zeros(live.size, dtype=bool)  # the auction: largest shares first, each while its GPUs fit
            free = s.n_gpus
            for i, gj in enumerate(g[order].tolist()):
                if free <= 0:
                    break
                if gj <= free:
                    take[i] = True
                    free -= gj
            run = live[take]
            jobs, gpus = live, np.where(take, clk.g[live], 0)  # the others wait or are preempted
            self.iters[run] -= slot * clk.speed[run]
            done = run[self.iters[run] <= 0]
            self.ending = done.tolist()
            self.end_time[done] = now + slot
        more = np.count_nonzero(s.status == FUTURE) > len(arrivals)  # arrivals still to come after these
        nxt = now + slot if self.live or more else None
        return rigid_decision(jobs, gpus, leave, self.end_time[leave], ok, declined, nxt)
