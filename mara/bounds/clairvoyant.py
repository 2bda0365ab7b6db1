"""Clairvoyant: the exact best number of successes any schedule can reach, knowing every curve.

Not a policy (docs/allocators.md): an offline upper bound that sees each task's true demand.

Model (docs/architecture.md, with one deliberate relaxation)
-------------------------------------------------------
``M`` identical nodes; time is discrete.  Task ``k`` has integer arrival ``b_k``, deadline
``d_k = b_k + B_k`` and ``need_k`` = the number of batches after which its cumulative-average loss
first reaches its target (``NEVER = np.iinfo(np.int32).max`` if it never does).  At every step a
node serves at most one task, a task gets at most one node, and a served task executes exactly one
batch.  Task ``k`` may be served at steps ``b_k <= t < d_k`` and succeeds iff it receives at least
``need_k`` batches there.  A task that has not started succeeds only by being served, so a demand
below one batch is treated as one batch (here and in :func:`independent_feasible`).

**Relaxation: the admission limit K (at most 10 active tasks, FIFO queue) is dropped.**  Every
schedule the real simulator can run is also a schedule of this relaxed model, so removing a
constraint can only enlarge the feasible set; the optimum here is therefore a true upper bound on
the success count of every policy (FIFO, EDF, LARA, MARA, ...), and on any K.  It is not
necessarily attained under K = 10.

Exact formulation
-----------------
Tasks with ``need_k > B_k`` can never succeed and are fixed to ``z_k = 0`` up front.  The event
times (all ``b_k`` and ``d_k`` of the remaining tasks) cut time into elementary intervals ``I`` of
length ``l_I``; within an interval the set of available tasks is constant.  Variables: integer
``y_{k,I} in [0, l_I]`` (batches task ``k`` receives in ``I``, for ``I`` inside its window) and
binary ``z_k``.  Constraints: ``sum_k y_{k,I} <= M * l_I`` for every interval, and
``sum_I y_{k,I} = need_k * z_k`` (equality is w.l.o.g.: surplus batches can always be removed,
and it removes symmetric solutions).  Objective: maximise ``sum_k z_k``.  Capacity rows are
written only for intervals spanned by more than ``M`` candidates (elsewhere they cannot bind).

Why this is exact (realisability, McNaughton's wrap-around rule): given integers
``y_{k,I} <= l_I`` with ``sum_k y_{k,I} <= M * l_I``, lay the ``M * l_I`` node-steps of interval
``I = [t0, t0 + l_I)`` out as one line: node 0 steps t0..t0+l_I-1, then node 1 steps
t0..t0+l_I-1, and so on.  Fill the line with task after task, each taking ``y_{k,I}`` consecutive
slots.  Total demand fits on the line, so every unit gets a (node, step).  A task's block occupies
either one node (no overlap possible) or wraps once, from offset ``s`` to the end of node ``j``
(steps ``[t0+s, t0+l_I)``) and then from the start of node ``j+1`` (steps
``[t0, t0+y-(l_I-s))``).  The two pieces overlap in time iff ``y - (l_I - s) > s``, i.e.
``y > l_I``, which is excluded; so no task is ever on two nodes in the same step, and each node
serves one task per step.  Conversely every real schedule induces such ``y``.  Hence the integer
program's optimum equals the best achievable success count.  :func:`feasible_schedule` builds the
step-by-step schedule this way.

Heterogeneous nodes and switch costs: a proven upper bound, not exact
--------------------------------------------------------------------
With ``node_speed`` (node i processes ``s_i`` batches per step) the same program is solved with
``y_{k,I} in [0, s_max * l_I]`` (a task gets at most one node, so at most the fastest node's
batches per step) and ``sum_k y_{k,I} <= S * l_I`` with ``S = sum_i s_i``; a task is a candidate iff
``need_k <= s_max * B_k``.  Every simulator schedule induces such ``y`` (cut a final step's overshoot
back to ``need_k``), so the optimum is an upper bound on every policy.  It is not exact: the
uniform-machine conditions on the j fastest nodes for 1 < j < M are dropped, and so is the batch
granularity of a speed-s step.  Switch costs are relaxed to 0 (set-up steps only remove batches
from a simulator schedule, so the bound stays valid).  ``feasible_schedule`` stays identical-node only.

Solver: OR-Tools CP-SAT, one worker and a fixed seed, so a solve that finishes is deterministic.
``time_limit_s`` (wall clock) is the budget of the whole episode.  Time-disjoint groups of tasks
are solved independently; a group never holding more than ``M`` candidates at once needs no solver.
A cheap "energy" bound over all windows of event times (:func:`_window_bound`) stops the search as
soon as a solution meets it (that also proves optimality).  If optimality is not proven in time,
``optimal`` is False, ``successes``/``chosen`` are the best of CP-SAT's incumbent and a
flow-checked greedy, and ``upper_bound`` is the smaller of CP-SAT's proven bound and the window
bound (such results depend on machine speed).
"""

from __future__ import annotations

import time
from dataclasses import dataclass, field

import numpy as np

from mara.bounds import cpsat
from mara.bounds.cpsat import MissingORTools, stop_at_bound, time_components

__all__ = [
    "NEVER",
    "ClairvoyantResult",
    "MissingORTools",
    "clairvoyant_batch",
    "clairvoyant_episode",
    "feasible_schedule",
    "independent_feasible",
    "per_episode",
]

NEVER = int(np.iinfo(np.int32).max)


@dataclass
class ClairvoyantResult:
    successes: int  # best schedule found
    upper_bound: int  # proven bound (== successes when optimal)
    optimal: bool
    solve_time_s: float
    chosen: np.ndarray = field(repr=False)  # [n] bool, which tasks succeed


def _as_int64(a, name: str) -> np.ndarray:
    a = np.asarray(a)
    if a.ndim != 1:
        raise ValueError(f"{name} must be 1-D, got shape {a.shape}")
    return a.astype(np.int64)


def _check(arrival, deadline, need):
    b = _as_int64(arrival, "arrival")
    d = _as_int64(deadline, "deadline")
    q = _as_int64(need, "need")
    if not (b.shape == d.shape == q.shape):
        raise ValueError(f"shape mismatch: arrival {b.shape}, deadline {d.shape}, need {q.shape}")
    return b, d, np.maximum(q, 1)


def independent_feasible(arrival, deadline, need, unit: int = 1) -> np.ndarray:
    """Oracle: task ``k`` can succeed in isolation iff ``need_k <= unit * (deadline_k - arrival_k)``
    (``unit``: batches per step on the fastest node, 1 on identical nodes).

    Works on arrays of any (equal) shape; demands below one batch count as one.
    """
    b = np.asarray(arrival, dtype=np.int64)
    d = np.asarray(deadline, dtype=np.int64)
    q = np.maximum(np.asarray(need, dtype=np.int64), 1)
    return q <= unit * (d - b)


def _capacity(n_nodes: int, node_speed) -> tuple[int, int]:
    """(batches per step one task can get, batches per step all nodes give): (1, M) on identical nodes."""
    if node_speed is None:
        return 1, int(n_nodes)
    sp = np.asarray(node_speed, dtype=np.int64).reshape(-1)
    if len(sp) != n_nodes or np.any(sp < 1):
        raise ValueError(f"node_speed must be {n_nodes} positive integers, got {sp.tolist()}")
    return int(sp.max()), int(sp.sum())


def _intervals(b: np.ndarray, d: np.ndarray, idx: np.ndarray):
    """Elementary intervals of the tasks ``idx``: (starts, lengths, cover[k_local] = interval ids)."""
    times = np.unique(np.concatenate([b[idx], d[idx]]))
    starts, lengths = times[:-1], np.diff(times)
    lo = np.searchsorted(times, b[idx])
    hi = np.searchsorted(times, d[idx])
    cover = [np.arange(lo[j], hi[j]) for j in range(len(idx))]
    return starts, lengths, cover


def _solve_group(cp_model, b, d, q, idx, n_nodes, time_limit_s, unit=1):
    """Solve one time-connected group.  Returns (chosen local bool, best, bound, optimal).

    ``n_nodes`` is the batches per step of all nodes together and ``unit`` the most one task gets per step
    (M and 1 on identical nodes; the sum and the maximum of the speeds otherwise)."""
    n = len(idx)
    starts, lengths, cover = _intervals(b, d, idx)
    n_int = len(lengths)
    members = [[] for _ in range(n_int)]
    for j in range(n):
        for i in cover[j]:
            members[i].append(j)
    crowded = [i for i in range(n_int) if len(members[i]) * unit > n_nodes]
    if not crowded:  # never more than M candidates at once: serve all of them continuously
        return np.ones(n, dtype=bool), n, n, True

    model = cp_model.CpModel()
    z = [model.NewBoolVar(f"z{j}") for j in range(n)]
    y = {}
    for j in range(n):
        vs = []
        for i in cover[j]:
            v = model.NewIntVar(0, unit * int(lengths[i]), f"y{j}_{i}")
            y[j, i] = v
            vs.append(v)
        model.Add(sum(vs) == int(q[idx[j]]) * z[j])
    for i in crowded:  # capacity binds only where more than M candidates are available
        model.Add(sum(y[j, i] for j in members[i]) <= n_nodes * int(lengths[i]))
    model.Maximize(sum(z))
    # A cheap combinatorial bound; the search stops as soon as a solution meets it.  (Adding it
    # to the model as a cut was measured to slow typical solves down ~2x, so it is only a stop.)
    wb = _window_bound(b, d, q, idx, n_nodes, unit)

    solver = cpsat.solver(time_limit_s)
    stop = stop_at_bound(z, wb)
    status = solver.Solve(model, stop)
    if status == cp_model.OPTIMAL or (status == cp_model.FEASIBLE and stop.hit):
        chosen = np.array([bool(solver.Value(zj)) for zj in z], dtype=bool)
        best = int(chosen.sum())
        return chosen, best, best, True
    # Not proven optimal in time.  Keep the solver's best (the empty set is always feasible) and
    # its proven bound; a cheap flow-checked greedy may still beat a poor incumbent.
    # Only a FEASIBLE response carries a meaningful bound: after an UNKNOWN (limit hit before the
    # search, e.g. in presolve) BestObjectiveBound() reads 0, which is no bound at all.
    bound = wb
    chosen = np.zeros(n, dtype=bool)
    if status == cp_model.FEASIBLE:
        chosen = np.array([bool(solver.Value(zj)) for zj in z], dtype=bool)
        bb = solver.BestObjectiveBound()
        if np.isfinite(bb):
            bound = min(bound, int(np.floor(bb + 1e-6)))
    greedy = _greedy_group(b, d, q, idx, n_nodes, unit)
    if greedy.sum() > chosen.sum():
        chosen = greedy
    best = int(chosen.sum())
    bound = max(bound, best)
    return chosen, best, bound, best == bound  # a met bound proves optimality too


def _window_bound(b, d, q, idx, n_nodes, unit=1) -> int:
    """Cheap valid upper bound (used only when CP-SAT stops early).

    For any window W = [s, e) of event times, a successful task k must receive at least
    m_k = max(0, need_k - (B_k - |W n [b_k, d_k)|)) batches inside W, and W offers M*|W|.  So at
    most (#tasks with m_k = 0) + (the most tasks whose smallest m_k fit in M*|W|) succeed; take
    the minimum over all windows (the whole span gives the plain knapsack on needs).
    """
    bb, dd, qq = b[idx], d[idx], q[idx]
    times = np.unique(np.concatenate([bb, dd]))
    best = len(idx)
    big = np.iinfo(np.int64).max // (len(idx) + 1)
    for a, s in enumerate(times[:-1]):
        ends = times[a + 1 :, None]  # every window [s, e) at once: [n_windows, n]
        ov = np.clip(np.minimum(dd, ends) - np.maximum(bb, s), 0, None)
        mand = np.maximum(0, qq - unit * (dd - bb - ov))
        free = (mand == 0).sum(axis=1)
        pos = np.sort(np.where(mand > 0, mand, big), axis=1)
        fit = (np.cumsum(pos, axis=1) <= n_nodes * (ends - s)).sum(axis=1)
        best = min(best, int((free + fit).min()))
    return best


def _greedy_group(b, d, q, idx, n_nodes, unit=1) -> np.ndarray:
    """Fallback lower bound: add tasks by increasing need while the set stays flow-feasible."""
    keep = np.zeros(len(idx), dtype=bool)
    for j in np.lexsort((d[idx], q[idx])):
        keep[j] = True
        if _allocate(b, d, q, idx[keep], n_nodes, unit) is None:
            keep[j] = False
    return keep


def clairvoyant_episode(
    arrival, deadline, need, n_nodes: int = 7, time_limit_s: float = 10.0, node_speed=None
) -> ClairvoyantResult:
    """Best success count of one episode (1-D int arrays over its tasks), K relaxed.

    ``node_speed`` (M positive ints): solve the speed-capacity relaxation instead (module
    docstring); ``upper_bound`` is then a proven bound on every policy, not an attained optimum."""
    cp_model = cpsat.cp_model()
    t0 = time.perf_counter()
    b, d, q = _check(arrival, deadline, need)
    if n_nodes < 0:
        raise ValueError("n_nodes must be >= 0")
    unit, total = _capacity(n_nodes, node_speed) if n_nodes > 0 else (1, 0)
    n = len(b)
    cand = np.flatnonzero(independent_feasible(b, d, q, unit)) if n_nodes > 0 else np.zeros(0, np.int64)
    return by_groups(
        n,
        time_components(b, d, cand),
        lambda g, left, _: _solve_group(cp_model, b, d, q, g, total, left, unit),
        time_limit_s,
        t0,
    )


def by_groups(n: int, groups: list, solve_group, time_limit_s: float, t_start: float) -> ClairvoyantResult:
    """One episode's result summed over its time-disjoint groups of task indices.

    ``solve_group(g, left_s, groups_left)`` gets the episode budget still left and the number of groups not yet
    solved (``g`` included) and returns ``(chosen bool[len(g)], successes, upper_bound, optimal)``."""
    chosen = np.zeros(n, dtype=bool)
    best = bound = 0
    optimal = True
    for gi, g in enumerate(groups):
        left = time_limit_s - (time.perf_counter() - t_start)
        ch, gb, gu, gopt = solve_group(g, left, len(groups) - gi)
        chosen[g] = ch
        best += gb
        bound += gu
        optimal &= gopt
    return ClairvoyantResult(
        successes=int(best),
        upper_bound=int(bound),
        optimal=bool(optimal),
        solve_time_s=time.perf_counter() - t_start,
        chosen=chosen,
    )


def per_episode(solve, arrival, deadline, need, n_tasks, *args) -> list[ClairvoyantResult]:
    """Apply an episode solver ``solve(arrival, deadline, need, *args)`` to each row of padded ``[E, N]``
    arrays (the first ``n_tasks[e]`` entries of row ``e`` are real)."""
    cpsat.cp_model()
    arrival, deadline, need = (np.asarray(a) for a in (arrival, deadline, need))
    n_tasks = np.asarray(n_tasks, dtype=np.int64).reshape(-1)
    if arrival.ndim != 2 or arrival.shape != deadline.shape or arrival.shape != need.shape:
        raise ValueError("arrival, deadline, need must be equal-shaped [E, N] arrays")
    if len(n_tasks) != arrival.shape[0]:
        raise ValueError("n_tasks must have one entry per episode")
    return [solve(arrival[e, :m], deadline[e, :m], need[e, :m], *args) for e, m in enumerate(n_tasks)]


def clairvoyant_batch(
    arrival, deadline, need, n_tasks, n_nodes: int = 7, time_limit_s: float = 10.0, node_speed=None
) -> list[ClairvoyantResult]:
    """Per-episode :func:`clairvoyant_episode` over padded ``[E, N]`` arrays; ``time_limit_s`` per episode."""
    return per_episode(clairvoyant_episode, arrival, deadline, need, n_tasks, n_nodes, time_limit_s, node_speed)


# --------------------------------------------------------------------------- realising a schedule


def _max_flow(edges: list[tuple[int, int, int]], s: int, t: int):
    """Max-flow on integer capacities (OR-Tools' ``SimpleMaxFlow``) over a non-empty list of edges
    ``(tail, head, capacity)``; returns (value, flow per edge in input order)."""
    flow = cpsat.max_flow().SimpleMaxFlow()
    tails, heads, caps = (np.array(c, dtype=np.int64) for c in zip(*edges))
    arcs = flow.add_arcs_with_capacity(tails, heads, caps)
    status = flow.solve(s, t)
    if status != flow.OPTIMAL:
        raise RuntimeError(f"max-flow did not solve: {status}")
    return int(flow.optimal_flow()), flow.flows(arcs).tolist()


def _allocate(b, d, q, idx, n_nodes, unit=1):
    """Batches per (task, elementary interval) letting every task in ``idx`` succeed, or None.

    Max-flow source -> task (``need_k``) -> interval (``l_I``) -> sink (``M * l_I``); the set is
    feasible iff the flow saturates every task.  Returns (starts, lengths, per_interval) where
    per_interval[i] lists (task index, batches) with batches <= l_I and sum <= M * l_I.
    """
    if len(idx) == 0:
        return np.zeros(0, np.int64), np.zeros(0, np.int64), []
    if n_nodes <= 0 or np.any(q[idx] > unit * (d[idx] - b[idx])):
        return None
    starts, lengths, cover = _intervals(b, d, idx)
    n, n_int = len(idx), len(lengths)
    src, snk = n + n_int, n + n_int + 1
    edges = [(src, j, int(q[idx[j]])) for j in range(n)]
    ti = []
    for j in range(n):
        for i in cover[j]:
            ti.append((len(edges), j, int(i)))
            edges.append((j, n + int(i), unit * int(lengths[i])))
    edges += [(n + i, snk, n_nodes * int(lengths[i])) for i in range(n_int)]
    value, flows = _max_flow(edges, src, snk)
    if value < int(q[idx].sum()):
        return None
    per_interval = [[] for _ in range(n_int)]
    for e, j, i in ti:
        if flows[e]:
            per_interval[i].append((int(idx[j]), flows[e]))
    return starts, lengths, per_interval


def feasible_schedule(arrival, deadline, need, chosen, n_nodes: int = 7) -> np.ndarray:
    """Step-by-step schedule ``[n_steps, n_nodes]`` of task indices (-1 idle) in which every chosen
    task receives exactly ``need_k`` batches inside ``[arrival_k, deadline_k)``.

    Row ``t`` is absolute step ``t``; ``n_steps = max(deadline)`` (0 for no tasks).  The per-interval
    batch counts come from a max-flow (tasks -> elementary intervals, capacity ``l_I`` per edge and
    ``M * l_I`` per interval); each interval is then filled by McNaughton's wrap-around rule (see
    the module docstring).  Raises ``ValueError`` if the chosen set cannot all succeed.
    """
    b, d, q = _check(arrival, deadline, need)
    chosen = np.asarray(chosen, dtype=bool).reshape(-1)
    if chosen.shape != b.shape:
        raise ValueError("chosen must have one entry per task")
    n_steps = int(d.max()) if len(d) else 0
    sched = np.full((max(n_steps, 0), n_nodes), -1, dtype=np.int64)
    idx = np.flatnonzero(chosen)
    if len(idx) == 0:
        return sched
    if np.any(b[idx] < 0):
        raise ValueError("arrival steps must be >= 0")
    alloc = _allocate(b, d, q, idx, n_nodes)
    if alloc is None:
        raise ValueError("chosen set is infeasible")
    starts, lengths, per_interval = alloc
    for i, (t0, ell) in enumerate(zip(starts.tolist(), lengths.tolist())):
        # McNaughton's wrap-around: walk one line of slots node0[t0..t0+ell), node1[t0..t0+ell),
        # ...; each task takes `amount <= ell` consecutive slots, so if it wraps from node j to
        # node j+1 its two pieces [t0+off, t0+ell) and [t0, t0+amount-(ell-off)) are disjoint in
        # time; and sum(amount) <= M*ell keeps every slot on a real node.
        pos = 0
        for k, amount in per_interval[i]:
            for _ in range(amount):
                node, off = divmod(pos, ell)
                sched[t0 + off, node] = k
                pos += 1
    return sched
