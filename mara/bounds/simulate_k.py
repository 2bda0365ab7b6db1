"""The simulator's FIFO-eager admission rules, exact, for one episode of known needs.

The reference the Clairvoyant-K bound (:mod:`mara.bounds.clairvoyant_k`) reasons about:
:func:`simulate_k` re-implements :class:`mara.sim.env.BatchedEnv`'s admission limit K, deadlines and
completions step by step; :func:`heuristic_schedule` runs clairvoyant priority rules in it (the
bound's incumbent); :func:`admission_window` brackets every task's admission step in any run.
"""

from __future__ import annotations

from typing import Callable, Sequence

import numpy as np

__all__ = ["fifo_episode", "simulate_k", "heuristic_schedule", "admission_window"]


def fifo_episode(arrival, deadline, need):
    """Validated int64 ``(arrival, deadline, need)`` of one episode in arrival order; ``d >= b + 1``, ``need >= 1``."""
    b = np.asarray(arrival)
    d = np.asarray(deadline)
    q = np.asarray(need)
    for a, name in ((b, "arrival"), (d, "deadline"), (q, "need")):
        if a.ndim != 1:
            raise ValueError(f"{name} must be 1-D, got shape {a.shape}")
    if not (b.shape == d.shape == q.shape):
        raise ValueError(f"shape mismatch: arrival {b.shape}, deadline {d.shape}, need {q.shape}")
    b, d, q = b.astype(np.int64), d.astype(np.int64), q.astype(np.int64)
    if len(b) > 1 and np.any(np.diff(b) < 0):
        raise ValueError("tasks must be indexed in arrival order (arrival non-decreasing)")
    return b, np.maximum(d, b + 1), np.maximum(q, 1)


def simulate_k(
    arrival,
    deadline,
    need,
    n_nodes: int,
    max_active: int,
    choose: Callable[[int, list, np.ndarray], Sequence[int]],
    node_speed=None,
):
    """Pure-python re-implementation of the simulator's rules for one episode.

    ``choose(t, active, served)`` gets the step, the active task indices (admission order) and the
    batches served so far per task, and returns at most ``n_nodes`` distinct active tasks to serve.
    Returns ``(succeeded bool[n], served_steps list[list[int]], admitted_at int[n] (-1 never))``.
    ``node_speed``: the i-th task of ``choose``'s answer runs on the i-th fastest node (no switch costs).
    """
    speeds = [1] * n_nodes if node_speed is None else sorted((int(v) for v in node_speed), reverse=True)
    b, d, q = fifo_episode(arrival, deadline, need)
    n = len(b)
    served = np.zeros(n, dtype=np.int64)
    ok = np.zeros(n, dtype=bool)
    adm = np.full(n, -1, dtype=np.int64)
    steps: list[list[int]] = [[] for _ in range(n)]
    if n == 0:
        return ok, steps, adm
    queue: list[int] = []
    active: list[int] = []
    nxt = 0
    t = int(b.min())
    end = int(d.max())
    while t < end or queue or active:
        while nxt < n and b[nxt] == t:
            queue.append(nxt)
            nxt += 1
        while len(active) < max_active and queue:
            k = queue.pop(0)
            adm[k] = t
            active.append(k)
        pick = list(choose(t, list(active), served)) if active else []
        if len(pick) > n_nodes or len(set(pick)) != len(pick) or any(k not in active for k in pick):
            raise ValueError(f"invalid action at step {t}: {pick}")
        for i, k in enumerate(pick):
            served[k] += speeds[i]
            steps[k].append(t)
        won = [k for k in pick if served[k] >= q[k]]
        ok[won] = True
        active = [k for k in active if not ok[k] and d[k] > t + 1]
        queue = [k for k in queue if d[k] > t + 1]
        t += 1
        if nxt < n and not queue and not active:
            t = max(t, int(b[nxt]))
    return ok, steps, adm


def _priority_policy(b, d, q, n_nodes, targets, key, unit=1):
    """Serve the targets that can still finish, smallest ``key(t, k, remaining)`` first."""

    def choose(t, active, served):
        live = [k for k in active if targets[k] and q[k] - served[k] <= unit * (d[k] - t)]
        live.sort(key=lambda k: (key(t, k, q[k] - served[k]), k))
        return live[:n_nodes]

    return choose


_KEYS = {
    "edf": lambda b, d, q: lambda t, k, r: d[k],
    "llf": lambda b, d, q: lambda t, k, r: d[k] - t - r,
    "srpt": lambda b, d, q: lambda t, k, r: r,
    "fifo": lambda b, d, q: lambda t, k, r: k,
}


def heuristic_schedule(b, d, q, n_nodes, max_active, target_sets, node_speed=None):
    """Best realised schedule over a few clairvoyant priority rules and target sets."""
    best = None
    unit = 1 if node_speed is None else int(max(node_speed))
    for targets in target_sets:
        for name, mk in _KEYS.items():
            ok, steps, adm = simulate_k(
                b, d, q, n_nodes, max_active, _priority_policy(b, d, q, n_nodes, targets, mk(b, d, q), unit), node_speed
            )
            if best is None or ok.sum() > best[0].sum():
                best = (ok, steps, adm)
    return best


def _admissions(b, d, q, K, fast):
    """FIFO-eager admission steps (-1: expires in the queue) when every task departs as early as
    it possibly could (``fast``: at ``min(d_k, A_k + need_k)`` if ``fast[k]``, else ``d_k``; ``q`` here
    is the least number of served steps, ``ceil(need_k / s_max)`` on heterogeneous nodes)."""
    n = len(b)
    adm = np.full(n, -1, dtype=np.int64)
    leave = []  # departure steps of the tasks holding a slot
    nxt, queue = 0, []
    for t in range(int(b.min()), int(d.max())):
        while nxt < n and b[nxt] == t:
            queue.append(nxt)
            nxt += 1
        queue = [k for k in queue if d[k] > t or b[k] == t]
        leave = [x for x in leave if x > t]
        while queue and len(leave) < K:
            k = queue.pop(0)
            adm[k] = t
            leave.append(min(int(d[k]), t + int(q[k])) if fast[k] else int(d[k]))
    return adm


def admission_window(b, d, q, K, cand):
    """Valid bounds on every task's admission step ``A_k`` in any run of the simulator.

    ``early[k]``: admissions when each task leaves as early as it could (a candidate after
    ``need_k`` steps of service, others at ``d_k``) -- since earlier departures never delay a FIFO
    admission (:mod:`mara.bounds.clairvoyant_k`), no run admits ``k`` before ``early[k]``, and none admits it at all
    if ``early[k] = -1``.  ``late[k]``: admissions when nobody ever succeeds -- no run admits ``k``
    later (when ``late[k] >= 0``).
    """
    return _admissions(b, d, q, K, cand), _admissions(b, d, q, K, np.zeros(len(b), dtype=bool))
