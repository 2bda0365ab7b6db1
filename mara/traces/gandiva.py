"""Gandiva (Xiao et al., OSDI 2018) as ElasticFlow's evaluation runs it: rigid jobs packed into node sets and
time-sliced when a node set holds more jobs than fit, with no view of deadlines.

Written from the paper and from what the ElasticFlow authors' simulator does when run (docs/traces-fidelity.md):
  * **Node sets.** Jobs of one size g share node sets of ceil(g / GPUs per node) nodes; a set runs
    ``capacity = nodes × GPUs per node // g`` of its jobs at once and time-slices the rest: at each decision on the
    slot grid (every slot of trace time from 0) the jobs that ran go to the back of its queue. A set's ``util`` counts
    the jobs put in it (not lowered when they leave), and a set is given back to the free nodes once it is empty.
  * **Placement of an arrival**: into the least-used set of its size while ``util + 1 < capacity``, else a new set
    from free nodes, else time-sliced onto the least-used set of its size, else it waits (and is placed again only
    when a set is given back).
  * **Introspection** (before each decision's progress): each size gets GPUs in proportion to its jobs' GPU demand
    (at most its demand); a size over its share gives back its least-used sets (keeping one) and moves their jobs to
    its least-used sets; a size under it takes new sets from the free nodes, and re-deals its jobs over its sets when
    the last set it tried could not be made or spans several nodes.
  * **Clock**: decisions at (coalesced) arrivals, then every slot once arrivals are over; a job runs in the seconds
    it is among the running jobs of its set, less a set-up overhead charged to every placed job at each decision while
    arrivals remain; it finishes at the second its work is done, found at the next decision.
"""

from __future__ import annotations

import math

import numpy as np

from mara.sched.interface import Decision
from mara.traces.replay import FUTURE, JobState
from mara.traces.rigid import RigidClock, rigid_decision, runnable_arrivals, setup_overhead


class NodeSet:
    """Nodes given to jobs of one size: ``nodes`` count, ``cap`` jobs running at once, ``jobs`` queue, ``util``."""

    __slots__ = ("nodes", "cap", "jobs", "util")

    def __init__(self, nodes: int, cap: int, jobs: list, util: int):
        self.nodes, self.cap, self.jobs, self.util = nodes, cap, jobs, util


def _by_util(sets: list) -> None:
    sets.sort(key=lambda ns: ns.util)


class TraceGandiva:
    """Gandiva over a trace's rigid jobs (state ``[J]`` arrays shared with the simulator)."""

    name = "Gandiva"
    caps = "trace"  # rigid: each job on its trace's num_gpu
    own_clock = True  # it ends its jobs by the seconds they have run

    def __init__(self, overhead: bool = True, gpus_per_node: int = 8):
        self.overhead = overhead
        self.gpn = int(gpus_per_node)

    def start(self, state: JobState) -> None:
        self.s = state
        self.clk = RigidClock(state)
        J = len(state.submit)
        self.free = state.n_gpus // self.gpn  # free nodes
        self.sets: dict[int, list] = {}  # job size -> its node sets, least used first
        self.pending: list[int] = []
        self.ovh = np.zeros(J)
        self.ever_pended = np.zeros(J, dtype=bool)
        self.last_t = None
        self.count = 0

    # ------------------------------------------------------------------------------------------------ placement
    def _size(self, g: int) -> list:
        if g not in self.sets:
            self.sets[g] = []
            self.sets = dict(sorted(self.sets.items()))
        return self.sets[g]

    def _place(self, j: int) -> bool:
        g = int(self.clk.g[j])
        sets = self._size(g)
        if sets:
            ns = sets.pop(0)
            if ns.util + 1 < ns.cap:
                ns.util += 1
                ns.jobs.append(j)
                sets.append(ns)
                _by_util(sets)
                return True
            sets.append(ns)
        nn = -(-g // self.gpn)
        if nn <= self.free:
            self.free -= nn
            sets.append(NodeSet(nn, nn * self.gpn // g, [j], 1))
            _by_util(sets)
            return True
        if sets:  # no free nodes: time-slice on the least used set of its size
            ns = sets.pop(0)
            ns.util += 1
            ns.jobs.append(j)
            sets.append(ns)
            _by_util(sets)
            return True
        return False

    def _deal(self, sets: list, jobs: list) -> None:
        for j in jobs:
            ns = sets[0]
            ns.util += 1
            ns.jobs.append(j)
            _by_util(sets)

    def _expand(self, g: int, sets: list, k: int) -> None:
        nn = -(-g // self.gpn)
        last = 0
        for i in range(1, k + 1):
            last = i
            if nn <= self.free:
                self.free -= nn
                sets.append(NodeSet(nn, nn * self.gpn // g, [], 0))
                last = nn - 1  # the re-deal below happens only when this is > 0 (as the peer's simulator runs)
        if last > 0:
            jobs = [j for ns in sets for j in ns.jobs]
            for ns in sets:
                ns.jobs, ns.util = [], 0
            self._deal(sets, jobs)

    def _shrink(self, sets: list, k: int) -> None:
        k = min(k, len(sets) - 1)
        moved = []
        for _ in range(k):
            ns = sets.pop(0)
            moved.extend(ns.jobs)
            self.free += ns.nodes
        if k > 0:
            self._deal(sets, moved)

    def _introspect(self) -> None:
        """Resize each job size's node sets to its share of the GPUs (done before the next decision's progress)."""
        demand = {g: sum(len(ns.jobs) for ns in sets) * g for g, sets in self.sets.items()}
        occupied = {g: sum(ns.nodes for ns in sets) * self.gpn for g, sets in self.sets.items()}
        total = sum(demand.values())
        if total == 0:
            return
        for g, sets in self.sets.items():
            if demand[g] == 0:
                continue
            target = min(int(math.floor((demand[g] / total) * self.s.n_gpus)), demand[g])
            diff = target - occupied[g]
            if diff > 0:
                self._expand(g, sets, math.ceil(diff / g))
            elif diff < 0:
                self._shrink(sets, math.ceil(-diff / g))

    # ------------------------------------------------------------------------------------------------ decisions
    def _execute(self, now: int, dt: int) -> bool:
        """Progress of the running jobs of every set over the last ``dt`` s; ends; rotation. Returns: a set freed."""
        released = False
        rotate = now % self.s.slot == 0
        clk = self.clk
        for sets in self.sets.values():
            for ns in list(sets):
                conc = min(len(ns.jobs), ns.cap)
                ended = []
                for j in ns.jobs[:conc]:
                    clk.done[j] += max(dt - self.ovh[j], 0.0)
                    self.ovh[j] = 0.0
                    if clk.done[j] >= clk.work[j]:
                        ended.append((j, now - (clk.done[j] - clk.work[j])))
                if rotate and len(ns.jobs) > conc:
                    ns.jobs = ns.jobs[conc:] + ns.jobs[:conc]
                for j, end in ended:
                    ns.jobs.remove(j)
                    self.leave.append((j, end))
                if not ns.jobs:
                    self.free += ns.nodes
                    sets.remove(ns)
                    released = True
        self.ovh[self.ever_pended] = 0.0
        return released

    def decide(self, now: int, arrivals: np.ndarray) -> Decision:
        """Run the last interval, place arrivals (and waiting jobs when a set was freed); returns the next decision
        once arrivals are over (None before: arrivals are the events)."""
        s = self.s
        dt = 0 if self.last_t is None else now - self.last_t
        self.last_t = now
        self.leave: list = []  # (job, finish) of the jobs whose work is done
        released = self._execute(now, dt)
        ok, declined = runnable_arrivals(self.clk, arrivals)
        placed_now = []  # placed in a node set: started, running or time-sliced
        for j in ok.tolist():
            if self._place(j):
                placed_now.append(j)
            else:
                self.pending.append(j)
                self.ever_pended[j] = True
        if released:
            i = 0
            while i < len(self.pending):  # a placed job's successor is looked at only at the next release
                j = self.pending[i]
                if self._place(j):
                    self.pending.pop(i)
                    placed_now.append(j)
                i += 1
        placed = [j for sets in self.sets.values() for ns in sets for j in ns.jobs]
        more_arrivals = np.count_nonzero(s.status == FUTURE) > len(arrivals)  # still to come after these
        if more_arrivals:
            restart = self.count > 0 and self.count % s.slot == 0
            self.count += 1
            for j in placed:
                self.ovh[j] = setup_overhead(int(self.clk.g[j]), s.n_gpus, restart) if self.overhead else 0.0
        self._introspect()
        gpus = dict.fromkeys(placed, 0)  # placed jobs beyond their set's capacity wait for their turn
        for sets in self.sets.values():
            for ns in sets:
                for j in ns.jobs[: min(len(ns.jobs), ns.cap)]:
                    gpus[j] = int(self.clk.g[j])
        nxt = now + s.slot
        if more_arrivals or not (placed or self.pending) or not placed:
            nxt = None  # arrivals drive the decisions; or nothing left; or only jobs too big to ever be placed
        leave = [j for j, _ in self.leave]
        fin = [f for _, f in self.leave]
        return rigid_decision(list(gpus), list(gpus.values()), leave, fin, ok, declined, nxt, placed_now)
