"""The least-slack rule's shared steps: its order (``slack_keys``, every engine) and its GPUs per job on a pool of
multi-GPU, elastic jobs (``slack_allocation``, the trace engine). The rule itself is one class,
``mara.allocators.slack.SlackRule`` (``Slack-QR-q`` / ``Slack-Truth`` on the paper's protocol and on traces).

The order: predicted-finishable jobs by least slack, then cold ones (too few loss observations to judge; none on a
trace, whose jobs always carry an estimate), then hopeless (deferred) ones, by deadline; ties by deadline, then
arrival. On the paper's one-GPU-per-task nodes the first M jobs of the order are served. On a trace each job can run
on a level of GPUs (1, 2, 4, ... up to its cap) at its measured throughput. At a decision, with r a live job's
remaining iterations as the scheduler sees them (an estimate from its loss prefix, or the truth for the bound) and
τ = deadline − now:

  * **Slack** s = τ − r / v*, with v* the job's fastest measured throughput over its allowed levels (at most the
    cluster): the time it could spare if it ran alone at its best.
  * **Finishable** when s ≥ ``margin`` × τ; otherwise **deferred**: served only with GPUs no finishable job wants.
    Deferral is soft: a deferred job is never rejected, and the next decision judges it again on fresh estimates.
  * **Minimum shares**: finishable jobs, least slack first, each get the smallest level whose throughput finishes r
    by the deadline (its minimum satisfactory share) when that many GPUs are still free; one that does not fit
    waits and the next may take the GPUs (backfilling).
  * **Extra GPUs by marginal throughput**: free GPUs go one level step at a time to the finishable job holding GPUs
    whose progress rate (share of its remaining work per second, v / r) grows most per added GPU; then jobs still
    without GPUs (finishable ones that did not fit, then deferred ones by deadline) get the largest level that fits
    (at most their cap); then the same marginal steps over every job holding GPUs.

``slack_allocation`` is the trace rule as a pure function of what a scheduler observes (``TraceView`` → GPUs per
job). Arrays ``[n]`` over the live jobs of a decision (``[E, K]`` in ``slack_keys`` on the batched engine),
throughputs ``[n, L]`` over LEVELS (0: level not allowed).
"""

from __future__ import annotations

import heapq
from dataclasses import dataclass

import numpy as np

from mara.sched.interface import LEVELS

FINISHABLE, COLD, HOPELESS, SKIP = 0, 1, 2, 3
#: on a trace (no cold jobs there): not finishable by its estimate, served only with GPUs no finishable job wants
DEFERRED = 1


def slack_keys(stage, pred, tau, deadline, task) -> tuple[np.ndarray, ...]:
    """Lexicographic sort keys, most significant first: stage, within-stage key (slack ``tau - pred`` when
    finishable, else the deadline), deadline, arrival."""
    within = np.where(stage == FINISHABLE, tau - pred, deadline.astype(np.float64))
    return stage, within, deadline, task


@dataclass(frozen=True)
class TraceView:
    """What the rule observes at one decision, ``[n]`` over live jobs."""

    now: float
    remaining: np.ndarray  # float: remaining iterations as the scheduler sees them (estimate or truth)
    deadline: np.ndarray  # float: absolute deadline, s
    tput: np.ndarray  # [n, L] iterations per second per level of LEVELS (0: not allowed)
    n_gpus: int  # GPUs of the pool


def usable_tput(tput: np.ndarray, n_gpus: int) -> np.ndarray:
    """``tput [n, L]`` with levels above the pool's size zeroed."""
    return np.where(LEVELS[None, :] <= n_gpus, tput, 0.0)


def level_times(view: TraceView) -> np.ndarray:
    """Seconds each job needs for its remaining iterations at each level, inf where not allowed. -> [n, L]"""
    tp = usable_tput(view.tput, view.n_gpus)
    r = np.maximum(np.asarray(view.remaining, dtype=np.float64), 0.0)[:, None]
    with np.errstate(divide="ignore", invalid="ignore"):
        return np.where(tp > 0, r / np.where(tp > 0, tp, 1.0), np.inf)


def slack_of(view: TraceView) -> np.ndarray:
    """Time to deadline less the remaining time at the job's fastest level (-inf for a job with no level). -> [n]"""
    return (np.asarray(view.deadline, dtype=np.float64) - view.now) - level_times(view).min(axis=1, initial=np.inf)


def min_share(view: TraceView) -> np.ndarray:
    """Smallest GPU level (a count, 0 if none) at which each job finishes its remaining iterations by its deadline,
    running from now. -> [n] int"""
    ok = level_times(view) <= (np.asarray(view.deadline, dtype=np.float64) - view.now)[:, None]
    first = ok.argmax(axis=1)
    return np.where(ok.any(axis=1), LEVELS[first], 0)


def slack_order(view: TraceView, margin: float = 0.0) -> tuple[np.ndarray, np.ndarray]:
    """(stage [n]: FINISHABLE or DEFERRED, order [n]: job positions, finishable by least slack then deferred by
    deadline; ties by deadline then position)."""
    tau = np.asarray(view.deadline, dtype=np.float64) - view.now
    best = level_times(view).min(axis=1, initial=np.inf)
    slack = tau - best
    stage = np.where((slack >= margin * np.maximum(tau, 0.0)) & np.isfinite(slack), FINISHABLE, DEFERRED)
    keys = slack_keys(stage, best, tau, np.asarray(view.deadline), np.arange(len(stage)))
    return stage, np.lexsort(keys[::-1])


_LEVEL_LIST = LEVELS.tolist()
_LEVEL_INDEX = {lv: i for i, lv in enumerate(_LEVEL_LIST)}


def _step_value(tp_row: list, g: int, rem: float) -> tuple[int, float]:
    """(next allowed level above ``g`` GPUs, progress-rate gain v / r per added GPU of that step), on a job's
    throughputs ``tp_row [L]`` as a list; (0, 0.0) when there is none."""
    k = _LEVEL_INDEX[g]
    for i in range(k + 1, len(_LEVEL_LIST)):
        if tp_row[i] > 0:
            nxt = _LEVEL_LIST[i]
            return nxt, (tp_row[i] - tp_row[k]) / max(rem, 1e-9) / (nxt - g)
    return 0, 0.0


def _grow(gpus: np.ndarray, free: int, who: np.ndarray, tp: np.ndarray, rem: np.ndarray) -> int:
    """Give free GPUs one level step at a time to the job of ``who`` (positions holding GPUs) whose progress rate
    v / r grows most per added GPU (ties: the earliest in ``who``); returns the GPUs still free. ``gpus`` is updated
    in place. A job's step value changes only when it is grown, and a step that does not fit the free GPUs never will
    (they only shrink), so a heap of the steps replays the scan over every job at every step in O(log n) a step."""
    if who.size == 0:
        return free
    g, t = gpus[who], tp[who]
    above = (LEVELS[None, :] > g[:, None]) & (t > 0)
    ni, gi, rows = above.argmax(axis=1), LEVELS.searchsorted(g), np.arange(who.size)
    with np.errstate(divide="ignore", invalid="ignore"):
        val = (t[rows, ni] - t[rows, gi]) / np.maximum(rem[who], 1e-9) / (LEVELS[ni] - g)
    ok = np.flatnonzero(above.any(axis=1) & (val > 0.0))
    heap = list(zip((-val[ok]).tolist(), ok.tolist(), who[ok].tolist(), LEVELS[ni[ok]].tolist()))
    heapq.heapify(heap)
    while free > 0 and heap:
        _, pos, j, nxt = heapq.heappop(heap)
        if nxt - int(gpus[j]) > free:
            continue
        free -= nxt - int(gpus[j])
        gpus[j] = nxt
        nxt, val = _step_value(tp[j].tolist(), nxt, float(rem[j]))
        if nxt and val > 0.0:
            heapq.heappush(heap, (-val, pos, j, nxt))
    return free


def _largest_fit(tp_row: np.ndarray, free: int) -> int:
    """The largest allowed level that fits ``free`` GPUs (0: none)."""
    ok = (tp_row > 0) & (LEVELS <= free)
    return int(LEVELS[np.flatnonzero(ok)[-1]]) if ok.any() else 0


def slack_allocation(view: TraceView, margin: float = 0.0) -> np.ndarray:
    """GPUs per live job (a level of LEVELS or 0) under the least-slack rule (module docstring). -> [n] int"""
    n = len(view.remaining)
    gpus = np.zeros(n, dtype=np.int64)
    if n == 0:
        return gpus
    tp = usable_tput(np.asarray(view.tput, dtype=np.float64), view.n_gpus)
    rem = np.maximum(np.asarray(view.remaining, dtype=np.float64), 1e-9)
    stage, order = slack_order(view, margin)
    need = min_share(view)
    free = int(view.n_gpus)
    fin = order[stage[order] == FINISHABLE]
    for j in fin:  # minimum satisfactory shares, least slack first, backfilling
        if 0 < need[j] <= free:
            gpus[j] = need[j]
            free -= int(need[j])
    free = _grow(gpus, free, fin[gpus[fin] > 0], tp, rem)
    for j in order:  # jobs still without GPUs: the largest level that fits
        if free == 0:
            break
        if gpus[j] == 0:
            g = _largest_fit(tp[j], free)
            gpus[j] = g
            free -= g
    _grow(gpus, free, order[gpus[order] > 0], tp, rem)
    return gpus
