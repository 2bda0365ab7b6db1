"""The event-driven trace simulator: jobs of a trace replayed on N GPUs under one scheduling policy.

Time is integer seconds of trace time. A *decision* happens at events (a batch of arrivals, a job's end, a policy's
own re-plan time), never more often than one scheduling slot (``slot`` s, default 60): after a decision at t, when
the next event falls within (t, t + slot] and at least two events are queued, the next decision is at exactly
t + slot and takes every event up to then; a farther event is decided at its own time (no global grid, no idle
slots stepped through). At a decision:
  1. running jobs progress over the elapsed time at their measured speed, less the set-up overhead charged to them
     at the previous decision (never past their planned finish); a job that ran out of iterations early, or whose
     planned finish has passed, ends now;
  2. jobs whose end event has come leave and free their GPUs; a job met its deadline when its finish is <= deadline;
     with ``expire`` (a job's work is worthless after its deadline, as a paper-setting task's), a job still waiting or
     running when its deadline has come leaves unfinished (EXPIRED);
  3. the policy sees the arrivals and returns its decision (``mara.sched.interface.Decision``): the arrivals it
     admits or declines (admission control), every admitted job's GPU count (0 = waiting or preempted; a level 1, 2,
     4, ... of the job's measured table), planned finish, end event, set-up overhead and re-plan time; the simulator
     applies it (``apply``): a policy reads the job state, never writes it.
GPUs are a pool of N = nodes × GPUs per node; placement on nodes does not change speed (as in ElasticFlow's
simulator, where jobs may span nodes and placement only decides which set-up costs are cached), unless GPUs differ
in speed: with ``gpu_speed`` [N] a job its scheduler has placed on one GPU (``gpu_of``) runs at that GPU's multiple of
its measured speed (the paper's nodes of unequal speed; docs/traces.md, "One simulator").

Arrays are ``[J]`` over the jobs replayed (sorted by submission time).
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field

import numpy as np

from mara.sched.interface import NEVER, Decision, planned_finish
from mara.traces.throughput import LEVELS

FUTURE, PENDING, RUNNING, DONE, DECLINED, EXPIRED = 0, 1, 2, 3, 4, 5


@dataclass
class JobState:
    """The trace simulator's job state, ``[J]`` arrays: the scheduler's view (``mara.sched.interface.JobsView``),
    changed only by the simulator."""

    submit: np.ndarray  # int64
    ddl: np.ndarray  # int64 absolute deadline
    tput: np.ndarray  # [J, L] iters/s per level (0: not allowed)
    max_level: np.ndarray  # [J] index into LEVELS
    iter_left: np.ndarray  # float64
    n_gpus: int
    slot: int = 60
    expire: bool = False  # a job not finished by its deadline leaves then (EXPIRED)
    gpu_speed: np.ndarray | None = None  # [N] speed multiple of each GPU (None: all 1)
    status: np.ndarray = field(default=None)
    gpus: np.ndarray = field(default=None)  # current GPU count
    end_event: np.ndarray = field(default=None)  # float: time of the job's end event (NEVER: none)
    finish: np.ndarray = field(default=None)  # float: the finish the deadline test reads
    overhead: np.ndarray = field(default=None)  # set-up seconds charged to the next progress step
    started: np.ndarray = field(default=None)  # float: first time with GPUs (NaN: never)
    ended: np.ndarray = field(default=None)  # float: time the job left (NaN: not yet)
    gpu_seconds: np.ndarray = field(default=None)
    gpu_of: np.ndarray = field(default=None)  # [J] the GPU a one-GPU job is placed on (-1: not placed; speed 1)

    def __post_init__(self):
        J = len(self.submit)
        self.status = np.zeros(J, dtype=np.int8)
        self.gpus = np.zeros(J, dtype=np.int64)
        self.end_event = np.full(J, NEVER)
        self.finish = np.full(J, NEVER)
        self.overhead = np.zeros(J)
        self.started = np.full(J, np.nan)
        self.ended = np.full(J, np.nan)
        self.gpu_seconds = np.zeros(J)
        self.gpu_of = np.full(J, -1, dtype=np.int64)

    levels = LEVELS  # the GPU counts a job may run on (``max_level`` indexes them)

    @property
    def deadline(self) -> np.ndarray:  # [J] absolute deadline
        return self.ddl

    @property
    def arrival_rank(self) -> np.ndarray:  # [J] jobs are held in submission order
        return np.arange(len(self.submit))

    @property
    def present(self) -> np.ndarray:  # [J] bool admitted and not ended
        return (self.status == PENDING) | (self.status == RUNNING)

    def speed(self, j: int, g: int) -> float:
        """Iterations per second of job j on g GPUs (g a level)."""
        return float(self.tput[j, int(LEVELS.searchsorted(g))]) if g > 0 else 0.0


@dataclass
class Replay:
    """The outcome of one replay: per-job arrays and the occupancy trace."""

    met: np.ndarray  # [J] bool deadline met
    declined: np.ndarray  # [J] bool
    finish: np.ndarray  # [J] float finish time (NaN: declined / never finished)
    started: np.ndarray  # [J] float first start (NaN: never)
    gpu_seconds: np.ndarray  # [J]
    occupancy_t: np.ndarray  # [D] decision times
    occupancy: np.ndarray  # [D, J] is too big: [D, C] GPUs in use per size class after each decision
    decision_s: np.ndarray  # [D] wall seconds per decision
    n_decisions: int


def align(now: int, t, slot: int):
    """``t`` rounded up to the slot grid that starts at ``now``."""
    return now + -(-(t - now) // slot) * slot


def replay(state: JobState, policy, size_class: np.ndarray, n_classes: int, time_limit: float | None = None) -> Replay:
    """Run ``policy`` over the jobs of ``state`` to the end; ``size_class [J]`` bins GPUs for the occupancy trace."""
    import time as _time

    arrival_times = np.unique(state.submit)
    ai = 0  # next arrival batch
    by_submit = np.argsort(state.submit, kind="stable")  # arrivals are looked for from `seen` on: the jobs before
    seen = 0  # it in submission order have all left FUTURE (nothing returns to it), so no decision scans every job
    submitted = state.submit[by_submit]
    t = int(arrival_times[0])
    dt = 0
    policy.start(state)
    if getattr(policy, "own_clock", False):  # its clock ends its jobs: the simulator's iteration count never does
        state.iter_left[:] = NEVER
    occ_t, occ, dec_s = [], [], []
    idle = 0
    wall0 = _time.perf_counter()
    while True:
        w0 = _time.perf_counter()
        _progress(state, t, dt)
        _leave(state, t)
        new = []
        while ai < len(arrival_times) and arrival_times[ai] <= t:
            ai += 1
        if ai:
            while seen < len(by_submit) and state.status[by_submit[seen]] != FUTURE:
                seen += 1
            cand = by_submit[seen : int(np.searchsorted(submitted, t, side="right"))]
            new = np.sort(cand[state.status[cand] == FUTURE])
        replan_at = apply(state, t, policy.decide(t, np.asarray(new, dtype=np.int64)))
        dec_s.append(_time.perf_counter() - w0)
        occ_t.append(t)
        busy = np.flatnonzero(state.gpus)  # only jobs holding GPUs add to occupancy and GPU time
        occ.append(np.bincount(size_class[busy], weights=state.gpus[busy], minlength=n_classes))
        times = _event_times(state, t, arrival_times[ai : ai + 2], replan_at)
        if not times:
            waiting = np.flatnonzero((state.status == PENDING) | (state.status == RUNNING))
            if waiting.size == 0 or idle > 2:
                break  # nothing left, or jobs that can never run (the cluster is too small for them)
            idle += 1
            nxt = t + state.slot
        else:
            idle = 0
            first = min(times)
            nxt = t + state.slot if (first - t <= state.slot and len(times) >= 2) else first
            nxt = max(math.ceil(nxt), t + 1)
        dt = nxt - t
        state.gpu_seconds[busy] += state.gpus[busy] * dt
        t = nxt
        if time_limit is not None and _time.perf_counter() - wall0 > time_limit:
            raise TimeoutError(f"replay passed its time limit of {time_limit:.0f} s at trace time {t}")
    met = (state.status == DONE) & (state.finish <= state.ddl)
    fin = np.where(state.status == DONE, state.finish, np.nan)
    return Replay(
        met=met,
        declined=state.status == DECLINED,
        finish=fin,
        started=state.started.copy(),
        gpu_seconds=state.gpu_seconds.copy(),
        occupancy_t=np.asarray(occ_t),
        occupancy=np.asarray(occ).reshape(len(occ_t), n_classes),
        decision_s=np.asarray(dec_s),
        n_decisions=len(occ_t),
    )


def _leave(state: JobState, t: int) -> None:
    """Jobs whose end event has come leave (DONE); with ``expire``, live jobs whose deadline has come leave too."""
    ends = np.flatnonzero((state.status == RUNNING) & (state.end_event <= t))
    if ends.size:
        state.status[ends] = DONE
        state.ended[ends] = t
        state.gpus[ends] = 0
        state.end_event[ends] = NEVER
    if state.expire:
        late = np.flatnonzero(((state.status == PENDING) | (state.status == RUNNING)) & (state.ddl <= t))
        state.status[late] = EXPIRED
        state.ended[late] = t
        state.gpus[late] = 0
        state.end_event[late] = NEVER


def _event_times(state: JobState, t: int, arrivals: np.ndarray, replan_at) -> set:
    """The candidate times of the next decision after ``t``: the next (two) arrival batches, the next (two) end
    events, the policy's re-plan time and, with ``expire``, the next deadline of a live job (it leaves then)."""
    run = state.status == RUNNING
    ev = state.end_event[run & (state.end_event < NEVER)]
    times = set(arrivals.tolist())
    if ev.size:
        times.update(np.unique(ev)[:2].tolist())
    if replan_at is not None and replan_at > t:
        times.add(replan_at)
    if state.expire:
        live = (state.status == PENDING) | (state.status == RUNNING)
        d = state.ddl[live & (state.ddl > t)]
        if d.size:
            times.add(int(d.min()))
    return times


def apply(state: JobState, now: int, d: Decision) -> float | None:
    """Apply the policy's decision at ``now`` (``Decision``'s rules); returns its re-plan time."""
    if d.admit.size:
        state.status[d.admit] = PENDING
    if d.decline.size:
        state.status[d.decline] = DECLINED
    if d.leave.size:
        state.status[d.leave] = DONE
        state.ended[d.leave] = now
        state.gpus[d.leave] = 0
        state.end_event[d.leave] = NEVER
        state.finish[d.leave] = d.leave_finish
    if d.placed.size:
        state.status[d.placed] = RUNNING
        state.started[d.placed] = now
    j, g = d.jobs, d.gpus
    if j.size:
        _allocate(state, now, d, j, g)
    return _after(state, now, d)


def _allocate(state: JobState, now: int, d: Decision, j: np.ndarray, g: np.ndarray) -> None:
    """The decision's GPUs per job ``j`` [n], with their set-up seconds, placement, planned finish and end event."""
    state.gpus[j] = g
    if d.gpu_of is not None:
        state.gpu_of[j] = d.gpu_of
    if d.overhead is not None:
        state.overhead[j] = d.overhead
    on = g > 0
    fin = d.finish
    if fin is None:  # the engine plans the finish of a job given GPUs from its speed there
        fin = np.full(j.size, np.nan)
        if on.any():
            p = j[on]
            oh = 0.0 if d.overhead is None else d.overhead[on]
            fin[on] = planned_finish(now, state.iter_left[p], state.tput[p, LEVELS.searchsorted(g[on])], oh)
    keep = np.isnan(fin)
    if keep.any():
        state.finish[j[~keep]] = fin[~keep]
    else:
        state.finish[j] = fin
    state.end_event[j] = np.where(on, state.finish[j], NEVER) if d.end is None else d.end
    run = j[on]
    state.status[run] = RUNNING  # a job without GPUs keeps its status: waiting, or preempted (still RUNNING)
    state.started[run[np.isnan(state.started[run])]] = now


def _after(state: JobState, now: int, d: Decision) -> float | None:
    """The decision's job-model flags: finishes found by the simulator, the next run-out of work as an event."""
    if d.unplanned:
        live = state.present
        state.finish[live] = NEVER  # the simulator finds the finish when the job reaches its target
        state.end_event[live] = NEVER
    if d.work_events:
        return next_work_event(state, np.flatnonzero((state.status == RUNNING) & (state.gpus > 0)), now, d.replan_at)
    return d.replan_at


def next_work_event(s: JobState, run: np.ndarray, now: float, nxt: float | None) -> float | None:
    """The earlier of ``nxt`` and the first time after ``now`` at which a job of ``run`` (indices of jobs holding GPUs)
    finishes its remaining iterations at its current throughput, set-up overhead included."""
    if run.size:
        sp = s.tput[run, LEVELS.searchsorted(s.gpus[run])]
        t = now + s.overhead[run] + np.ceil(np.maximum(s.iter_left[run], 0.0) / sp)
        t = t[t > now]
        if t.size:
            nxt = float(t.min()) if nxt is None else min(nxt, float(t.min()))
    return nxt


def _progress(state: JobState, now: int, dt: int) -> np.ndarray:
    """Advance running jobs by ``dt`` seconds ending at ``now``; jobs that ran out early get their end event now."""
    if dt <= 0:
        return np.empty(0, dtype=np.int64)
    j = np.flatnonzero((state.status == RUNNING) & (state.gpus > 0))
    if j.size == 0:
        return j
    lvl = LEVELS.searchsorted(state.gpus[j])
    sp = state.tput[j, lvl]
    if state.gpu_speed is not None:
        on = state.gpu_of[j]
        sp = sp * np.where(on >= 0, state.gpu_speed[np.maximum(on, 0)], 1)
    run = np.full(j.size, float(dt))
    cap = state.finish[j]
    late = now > cap
    run[late] -= now - cap[late]
    run = np.where(run < state.overhead[j], 0.0, run - state.overhead[j])
    it = run * sp
    early = (state.iter_left[j] <= it) & (state.end_event[j] > now) & (sp > 0)
    if early.any():
        e = j[early]
        state.finish[e] = now - dt + np.ceil(state.iter_left[e] / sp[early])
        state.end_event[e] = now
    state.iter_left[j] -= it
    state.overhead[j] = 0.0
    passed = j[state.finish[j] <= now]  # planned finish already behind: the job leaves now, whatever set-up cost
    state.end_event[passed] = np.minimum(state.end_event[passed], now)  # is still owed (no job runs for ever)
    return j[early] if early.any() else np.empty(0, dtype=np.int64)
