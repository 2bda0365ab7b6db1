"""ElasticFlow (Gu et al., ASPLOS 2023): admission control, minimum satisfactory shares, leftover GPUs by marginal
GPU time, written from the paper and from what its authors' simulator does when run (docs/traces.md).

At each decision, with ``now`` the grid origin (plan times are rounded up to slots of ``slot`` s from ``now``):
  * **Minimum satisfactory share** of a job on a free-GPU profile: the smallest level q whose latest-start plan meets
    the deadline. Periods are the profile's breakpoints up to the aligned deadline; scanning them backwards, each
    gives min(q, the largest level that fits its free GPUs) (the last one counts only up to the real deadline); the
    plan starts in the latest period from which the iterations left fit, and runs one level lower before it. The
    job's GPUs are reserved until its finish rounded up to the grid. A job no level can save takes what fits.
  * **Admission**: when jobs arrive, every live job and every arrival gets a minimum plan in deadline order from an
    empty profile; if any plan misses its deadline, all arrivals of the decision are declined (they never run).
  * **Leftover GPUs**: live jobs get minimum plans again; the GPUs free now go, one level step at a time, to the job
    whose plan's GPU time grows most per added GPU (a job with none first), re-planned after each step.
  * **Set-up overhead** every decision for every job with GPUs: ``base`` s (7 on >= 256 GPUs, else 2), plus
    2 (log2 g + 1) s on the job's first start; charged to its next progress and delaying its end event, not its
    finish. A job ends at its finish rounded up to the grid plus that overhead; it met its deadline when its planned
    finish is <= its deadline.
"""

from __future__ import annotations

import math
from bisect import bisect_left, bisect_right
from heapq import heappop, heappush

import numpy as np

from mara.sched.interface import Decision
from mara.traces.profile import FreeProfile
from mara.traces.replay import NEVER, RUNNING, JobState, align
from mara.traces.throughput import LEVELS

BIG = float("inf")


class TraceElasticFlow:
    """ElasticFlow over a trace's jobs (state ``[J]`` arrays shared with the simulator)."""

    name = "ElasticFlow"
    caps = "elasticflow"  # GPU cap per job: ElasticFlow's per-model caps

    def __init__(self, overhead: bool = True, exact_marginals: bool = False):
        self.overhead = overhead
        self.exact_marginals = exact_marginals

    def start(self, state: JobState) -> None:
        self.s = state
        J = len(state.submit)
        self.plans: list = [None] * J  # (starts, gpus, end) per live job
        self.levels = [
            [int(g) for g, sp in zip(LEVELS, state.tput[j]) if sp > 0 and g <= state.n_gpus] for j in range(J)
        ]
        self.top = [lv[-1] if lv else 0 for lv in self.levels]
        # the largest level (at most ``top``) that fits f free GPUs, for 1 <= f <= N: fit_of[top][f]
        self.fit_of = {
            t: [0] + [min(1 << (f.bit_length() - 1), t) for f in range(1, state.n_gpus + 1)] for t in set(self.top)
        }
        # a job's next level above any GPU count it may hold (None above its top)
        self.up = [{int(g): next((v for v in lv if v > g), None) for g in [0, *LEVELS.tolist()]} for lv in self.levels]
        self.speeds = [{int(g): float(sp) for g, sp in zip(LEVELS, state.tput[j]) if sp > 0} for j in range(J)]
        self.ddl = [int(d) for d in state.ddl]  # deadlines as Python ints: read in every plan
        self.real_end = np.full(J, NEVER)
        self.started_once = np.zeros(J, dtype=bool)
        self.base = 7 if state.n_gpus >= 256 else 2

    # ------------------------------------------------------------------------------------------------ plans
    def min_plan(self, j: int, prof: FreeProfile, now: int, start: int, it: float):
        """Minimum satisfactory plan of job j from ``start``: (starts, gpus, real_end, end, feasible)."""
        return self._plan_on(j, self._periods(j, prof, now, start), prof, now, start, it)

    def _periods(self, j: int, prof: FreeProfile, now: int, start: int):
        """The periods job j can plan on from ``start`` to its aligned deadline: (starts, lengths, the largest level
        that fits each, the largest of those)."""
        slot, ddl = self.s.slot, self.ddl[j]
        a = now - (now - ddl) // slot * slot  # the deadline rounded up to the slot grid from now
        times = prof.times
        lo, hi = bisect_left(times, start), bisect_left(times, a) if a > start else None
        if hi is None or hi <= lo:
            bps, fr = [start], [prof.at(start)]
        else:
            bps, fr = times[lo:hi], prof.free[lo:hi]
            if bps[0] != start:
                bps, fr = [start] + bps, [prof.at(start)] + fr
        # each period's length; only the last one can end at the aligned deadline, and counts only up to the real one
        durs = [e - b for b, e in zip(bps, bps[1:])]
        last = max(a, start)
        durs.append(max(min(last, ddl) - bps[-1], 0) if last == a else last - bps[-1])
        fit = self.fit_of[self.top[j]]
        fits = [fit[f] if f > 0 else 0 for f in fr]
        return bps, durs, fits, max(fits)

    def _plan_on(self, j: int, periods, prof: FreeProfile, now: int, start: int, it: float):
        """``min_plan`` on periods made by ``_periods`` from the same profile and start."""
        bps, durs, fits, widest = periods
        n = len(bps)
        sp = self.speeds[j]
        prev = 0
        for q in self.levels[j]:
            acc = 0.0
            for k in range(n - 1, -1, -1):
                fk = fits[k]
                if fk == 0:
                    continue
                acc += durs[k] * sp[q if q < fk else fk]
                if acc >= it:
                    return self._walk(j, bps, fits, durs, k, q, prev, it)
            if q >= widest:  # every larger level plans the same periods at the same speeds: none meets it either
                break
            prev = q
        return self._fallback(j, prof, now, start, it)

    def _walk(self, j, bps, fits, durs, p, q, prev, it):
        """Run the plan forward: ``prev`` level before period p, q from it (``fits``: the largest level that fits
        each period); where the iterations run out. Periods at the same level are one segment of the plan."""
        slot = self.s.slot
        sp = self.speeds[j]
        starts, gpus = [], []
        held = -1
        rem = it
        for k in range(len(bps)):
            fk = fits[k]
            level = prev if k < p else q
            g = level if fk > level else fk
            if g != held:
                starts.append(bps[k])
                gpus.append(g)
                held = g
            if g == 0:
                continue
            v = sp[g]
            done = durs[k] * v
            if k >= p and done >= rem:
                left = math.ceil(rem / v)
                return starts, gpus, bps[k] + left, bps[k] - (-left // slot) * slot, bps[k] + left <= self.ddl[j]
            rem -= done
        g = held or (self.levels[j][-1] if self.levels[j] else 0)
        if g != held:  # the last period runs at the job's largest level: a segment of its own
            if starts[-1] == bps[-1]:
                gpus[-1] = g
            else:
                starts.append(bps[-1])
                gpus.append(g)
        left = math.ceil(rem / sp[g]) if g else 0
        return starts, gpus, bps[-1] + left, bps[-1] - (-left // slot) * slot, False

    def _fallback(self, j, prof: FreeProfile, now, start, it):
        """No level meets the deadline: what fits at each breakpoint, the job's largest level after the last one."""
        slot, ddl = self.s.slot, int(self.s.ddl[j])
        times, free = prof.times, prof.free
        lo = bisect_left(times, start)
        bps, fr = times[lo:], free[lo:]
        if not bps or bps[0] != start:
            bps, fr = [start] + bps, [prof.at(start)] + fr
        fit = self.fit_of[self.top[j]]
        sp = self.speeds[j]
        starts, gpus, rem, held = [], [], it, -1
        top = self.levels[j][-1] if self.levels[j] else 0
        n = len(bps)
        for k in range(n):
            b, f = bps[k], fr[k]
            last = k == n - 1
            g = fit[f] if f > 0 else 0
            if last and top > g:
                g = top
            if g != held:
                starts.append(b)
                gpus.append(g)
                held = g
            if g == 0:
                continue
            v = sp[g]
            if last or (bps[k + 1] - b) * v >= rem:
                left = math.ceil(rem / v)
                end = b + align(0, left, slot)
                real = b + left
                return starts, gpus, real, end, real <= ddl
            rem -= (bps[k + 1] - b) * v
        return starts, gpus, NEVER, NEVER, False

    def _reserve(self, prof: FreeProfile, plan, sign=-1):
        starts, gpus, _, end, _ = plan
        if end < NEVER:
            prof.apply_plan(starts, gpus, end, sign)

    @staticmethod
    def _gpu_time(plan) -> float:
        """GPU seconds a plan holds (whole seconds: exact in any order)."""
        starts, gpus, _, end, _ = plan
        tot = 0.0
        st, g = starts[0], gpus[0]
        for nx, gn in zip(starts[1:], gpus[1:]):
            tot += g * ((nx if nx < end else end) - st)
            st, g = nx, gn
        return tot + g * (end - st)

    def _iters(self, j: int) -> float:
        return max(float(self.s.iter_left[j]), 1e-6)

    def plan_all(self, jobs, now: int):
        """Minimum plans of ``jobs`` in deadline order on an empty profile: (profile, {job: plan}, all feasible)."""
        s = self.s
        prof = FreeProfile(now, s.n_gpus)
        plans, ok = {}, True
        for j in jobs[np.argsort(s.ddl[jobs], kind="stable")]:
            pl = self.min_plan(int(j), prof, now, now, self._iters(j))
            self._reserve(prof, pl)
            plans[int(j)] = pl
            ok &= pl[4]
        return prof, plans, ok

    # ---------------------------------------------------------------------------------------------- decide
    def decide(self, now: int, arrivals: np.ndarray) -> Decision:
        s = self.s
        live = np.flatnonzero(s.present)
        planned, admit, decline = None, arrivals[:0], arrivals[:0]
        if arrivals.size:
            planned = self.plan_all(np.concatenate([live, arrivals]), now)
            if planned[2]:
                admit = arrivals
                live = np.concatenate([live, arrivals])
            else:
                decline = arrivals
                planned = None
        if live.size == 0:
            return Decision(admit=admit, decline=decline)
        # admitted arrivals: the re-plan of the same jobs at the same time is the admission's plan itself
        prof, plans, _ = planned if planned is not None else self.plan_all(live, now)
        self._boost(live, plans, prof, now)
        replan = NEVER
        k = int(np.searchsorted(s.submit, now, side="right"))  # jobs come sorted by submission time
        queued = float(s.submit[k]) if k < len(s.submit) else NEVER
        gpus, finish, end = np.zeros(live.size, dtype=np.int64), np.empty(live.size), np.empty(live.size)
        oh = s.overhead[live].copy()
        for i, j in enumerate(live.tolist()):
            starts, steps, real, end_j, _ = plans[j]
            g = steps[0] if starts[0] == now else 0
            gpus[i], finish[i] = g, real
            self.plans[j] = plans[j]
            self.real_end[j] = real
            later = [t for t, g0, g1 in zip(starts[1:], steps, steps[1:]) if t > now and g1 != g0]
            if later:
                replan = min(replan, later[0])
            running = s.status[j] == RUNNING  # started before (a preempted job keeps its planned end)
            if g > 0:
                oh[i] = 0.0
                if self.overhead:
                    oh[i] = self.base + (0 if self.started_once[j] else 2 * (math.log2(g) + 1))
                self.started_once[j] = True
                end[i] = end_j + oh[i]
            else:
                end[i] = end_j if running else NEVER
            if g > 0 or running:
                queued = min(queued, end_j)
        # a re-plan is an event of its own only when it comes before every event already queued: the next arrival and
        # the jobs' ends as planned, before this round's set-up overhead moves them (as the authors' simulator does)
        at = None if replan >= queued or replan == NEVER else replan
        return Decision(live, gpus, finish, end, oh, admit=admit, decline=decline, replan_at=at)

    def _boost(self, live, plans, prof: FreeProfile, now: int) -> None:
        """Hand the GPUs free now to jobs, one level step at a time, largest GPU-time growth per GPU first. With
        ``exact_marginals`` every job's trial plan is recomputed after each step (ElasticFlow's own loop); otherwise
        only the grown job's is (much faster on busy clusters). A job's trials are planned on the profile without its
        own plan, which a step of that job leaves as it was (the new profile is it less the new plan): it serves the
        job's next trial too, and the new profile is made only when another job's trial needs it."""
        cur = {int(j): (plans[j][1][0] if plans[j][0][0] == now else 0) for j in live}
        spare = prof.at(now)
        order = [int(j) for j in live[np.argsort(self.s.ddl[live], kind="stable")]]
        its = {j: self._iters(j) for j in order}
        up, exact = self.up, self.exact_marginals
        cache: dict = {}  # job -> (trial plan, profile version it was planned on)
        version = 0  # bumped whenever ``prof`` changes: a trial of the current version is still exact
        held: dict = {}  # job -> GPU time of its current plan
        bare: dict = {}  # job -> (the profile without its plan, the version of ``prof`` it belongs to); read only
        owed = None  # (profile, plan): ``prof`` is that profile less that plan, not made yet

        def settle():
            nonlocal owed
            if owed is not None:
                p = owed[0].copy()
                self._reserve(p, owed[1])
                prof.times, prof.free = p.times, p.free
                owed = None

        def without(j):
            b = bare.get(j)
            if b is not None and b[1] == version:
                return b[0]
            settle()
            p = prof.copy()
            self._reserve(p, plans[j], sign=+1)
            bare[j] = (p, version)
            return p

        periods: dict = {}  # job -> (profile, start, its periods): a job's trials share its profile without its plan
        place = {j: i for i, j in enumerate(order)}
        heap: list = []  # (-marginal, place in deadline order, job): the largest marginal first, ties by deadline

        def offer(j):
            """Put job j's next step on the heap, with its marginal (a job that can no longer grow is left out)."""
            g = cur[j]
            nxt = up[j].get(g)
            if nxt is None or nxt - g > spare:
                return
            if g == 0:  # a job without GPUs comes first whatever its trial: planned only if it is chosen
                cache[j] = (None, -1)
                heappush(heap, (-BIG, place[j], j))
                return
            trial = self._trial(j, without(j), now, nxt, its[j], periods)
            if j not in held:
                held[j] = self._gpu_time(plans[j])
            cache[j] = (trial, version)
            heappush(heap, (-((self._gpu_time(trial) - held[j]) / (nxt - g)), place[j], j))

        for j in order:
            offer(j)
        while spare > 0 and heap:
            best = heappop(heap)[2]
            g = cur[best]
            if up[best][g] - g > spare:  # spare GPUs only shrink: this step never fits again
                continue
            trial, planned_on = cache.pop(best)
            base = without(best)
            if planned_on != version:  # the cached trial was planned on an older profile: plan it on this one
                trial = self._trial(best, base, now, up[best][g], its[best], periods)
            owed = (base, trial)
            version += 1
            bare[best] = (base, version)
            spare -= trial[1][0] - g
            cur[best] = trial[1][0]
            plans[best] = trial
            held.pop(best, None)
            if exact:  # every marginal afresh on the new profile
                heap.clear()
                for j in order:
                    offer(j)
            else:
                offer(best)
        settle()

    def _trial(self, j: int, prof: FreeProfile, now: int, g: int, it: float, periods: dict):
        """Job j at ``g`` GPUs until the profile's next breakpoint (or its aligned deadline), then its minimum plan
        (``it``: its iterations left; ``periods``: job -> (profile, start, periods) of its last trial, reused when
        planned on the same read-only profile from the same start)."""
        slot, ddl = self.s.slot, self.ddl[j]
        a = now - (now - ddl) // slot * slot  # the deadline rounded up to the slot grid from now
        times = prof.times
        k = bisect_right(times, now)
        nxt = times[k] if k < len(times) else a
        sp = self.speeds[j][g]
        left = math.ceil(it / sp)
        end = now - (-left // slot) * slot
        if nxt >= end and ddl >= now + left:
            return [now], [g], now + left, end, True
        dur = (ddl - now) if nxt == a else (nxt - now)
        rest = it - max(dur, 0) * sp
        if rest <= 0:
            return [now], [g], now + left, end, now + left <= ddl
        known = periods.get(j)
        if known is not None and known[0] is prof and known[1] == nxt:
            per = known[2]
        else:
            per = self._periods(j, prof, now, nxt)
            periods[j] = (prof, nxt, per)
        tail = self._plan_on(j, per, prof, now, nxt, rest)
        starts, gpus, real, end2, ok = tail
        return [now] + list(starts), [g] + list(gpus), real, end2, ok
