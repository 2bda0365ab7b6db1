"""Clairvoyant-K: the exact best number of successes WITH the admission limit K (FIFO, eager).

Not a policy (docs/allocators.md): an offline upper bound that sees each task's true demand, like
:mod:`mara.bounds.clairvoyant`, but it keeps the simulator's admission dynamics instead of
relaxing them.  Every number it returns as ``upper_bound`` is a true upper bound on the success
count of any policy in :class:`mara.sim.env.BatchedEnv` (same M, same K); when ``optimal`` is True
the bound is attained by a schedule the simulator can run.

Rules modelled (``mara/sim/env.py``)
------------------------------------
Tasks are indexed in arrival order (``arrival`` must be non-decreasing).  At step ``t``: arrivals
join a FIFO queue and, while fewer than K tasks hold a slot, the queue head is admitted (eager, no
skipping, no refusal); each of the ``M`` nodes serves at most one active task and a task gets at
most one node; a task succeeds at the end of the step in which its served batches reach
``need_k`` and frees its slot for the admission at ``t+1``; at the end of step ``t`` every active
or queued task with ``d_k <= t+1`` that has not succeeded fails and leaves.  So a task can be served
only at steps ``A_k <= t < d_k`` (``A_k >= b_k`` its admission step) and an admitted task holds its
slot until it succeeds or until ``d_k``; the policy cannot evict.  (A task with ``d_k <= b_k`` is
still admitted/served at step ``b_k`` by the simulator; we use ``d_k := max(d_k, b_k + 1)``.)

Exact formulation (time-indexed CP-SAT)
---------------------------------------
Per task ``k`` and step ``t`` in ``[b_k, d_k)``: ``adm[k,t]`` (admitted at or before ``t``,
monotone in ``t``); for tasks that can succeed at all (``need_k <= d_k - b_k``) also ``fin[k,t]``
(monotone, "released after step t"; ``z_k = fin[k, d_k-1]`` is success) and service ``x[k,t]``.
Occupancy is the linear expression ``occ[k,t] = adm[k,t] - fin[k,t-1]`` (``fin`` implies ``adm``).

* service: ``x[k,t] -> adm[k,t]``, ``x[k,t] -> not fin[k,t-1]``; ``sum_k x[k,t] <= M``;
  ``sum_t x[k,t] = need_k * z_k``; ``fin[k,t] -> adm[k, t-need_k+1]`` (a valid cut);
* slots: ``sum_k occ[k,t] <= K``;
* FIFO: ``adm[k,t] -> adm[p,t]`` with ``p`` the latest task before ``k`` still alive at ``t``
  (``b_p <= t < d_p``); by chaining, all alive earlier tasks are admitted first;
* eagerness: ``full[t] -> sum_k occ[k,t] >= K`` and ``not adm[k,t] -> full[t]`` (a task may wait at
  ``t`` only if all K slots are held).

Objective: maximise ``sum_k z_k``.  Failing tasks get no service w.l.o.g. and hold their slot until
``d_k`` once admitted.

Why this is exact.  Every simulator run gives a solution (``fin`` switches on at the completion
step; failing tasks have ``fin = 0``).  Conversely the model lets a succeeding task hold its slot
from ``A_k`` to any ``F_k`` >= its last service (``fin`` may switch on late), which the simulator
does not; but running the model's services ``x`` in the simulator realises the same successes:
there every task departs no later than in the model (``c_k + 1 <= F_k + 1``, failing tasks at
``d_k`` in both), and by induction over steps (and, within a step, over the index) every task is
admitted no later than in the model.  (If task ``k`` were admitted at ``t`` in the model but still
waited at ``t`` in the simulator, the simulator's K occupants at ``t`` all have smaller indices and
are alive at ``t``; by the model's FIFO rows they are admitted by ``t`` in the model too, and since
they depart no earlier there they occupy at ``t`` together with ``k``: K + 1 > K, a contradiction.)
So every model service ``x[k,t]`` is executable in the simulator, which therefore reaches every
success of the model.  Nothing is relaxed: the optimum is the simulator's optimum.

Admission windows (exact, from the same monotonicity: earlier departures never delay a FIFO
admission).  ``early_k``: the admission step when every task leaves as early as it could (a task
that can succeed after ``need_k`` steps of service from its admission, the others at ``d_k``); no
run admits ``k`` before ``early_k`` (nor at all if ``early_k`` never comes).  ``late_k``: the
admission step when nobody ever succeeds; no run admits ``k`` later.  So ``adm[k,t]`` is fixed to 0
before ``early_k`` and to 1 from ``late_k`` on; a task with ``early_k > d_k - need_k`` can never
succeed; and the K-relaxed Clairvoyant on the cut windows ``[early_k, d_k)`` is a valid bound that
is much tighter than the plain one (it alone closes most episodes of the p = 0.04 protocol).

Size reductions (all exact): components of tasks connected in time are independent; a task is
fixed admitted at every ``t`` where at most K tasks of index ``<= k`` are alive (it cannot be
waiting then); ``fin[k,t] = 0`` for ``t < early_k + need_k - 1``; slot rows only where more than K tasks
are alive, node rows only where more than M candidates are alive, eagerness only where some task
may be waiting; a component never holding more than K alive tasks has no admission effect and is
answered by the K-relaxed :func:`~mara.bounds.clairvoyant.clairvoyant_episode`.

Heterogeneous nodes: exact for speeds, a bound for switch costs
---------------------------------------------------------------
With ``node_speed`` (node i processes ``s_i`` batches per step) the nodes fall in speed classes ``c``
(speed ``s_c``, ``n_c`` nodes).  A served step ``x[k,t]`` is on exactly one class,
``sum_c v[k,t,c] = x[k,t]``, at most ``n_c`` tasks per class and step, and a success needs
``sum_{t,c} s_c v[k,t,c] >= need_k`` (a completing step may overshoot); failing tasks get no service
(w.l.o.g.); a completion needs ``ceil(need_k / s_max)`` served steps (``fin`` cut, ``early_k``
departures).  Within a step which node of a class serves whom does not matter, and without switch
costs nothing links steps but the batches, so the model is exact for speeds: a solution replays in
:func:`simulate_k` (fastest class first; a task never gets less than the model gave it).  Switch costs
are not modelled (the simulator's set-up steps only remove batches), so with ``switch_cost > 0`` the
optimum is a proven upper bound, not attained in general.  The K-relaxed speed-capacity bound
(:func:`clairvoyant_episode` with ``node_speed``) stays the cap ``U``; the "never more than K alive"
shortcut is not taken (that bound is not exact with speeds).

Bounds and search: the K-relaxed Clairvoyant optimum ``U`` on the cut windows caps the
objective; a few clairvoyant heuristic policies, run in an exact re-implementation of the
simulator (:func:`simulate_k`), give an incumbent and a solution hint; a solution meeting ``U``
stops the search (it is then optimal).  When optimality is not proven in ``time_limit_s`` (budget
of the whole episode), ``successes`` is the best realised schedule and ``upper_bound`` the minimum
of CP-SAT's proven bound and ``U`` (such results depend on machine speed).
"""

from __future__ import annotations

import time

import numpy as np

from mara.bounds import cpsat
from mara.bounds.clairvoyant import NEVER, ClairvoyantResult, by_groups, clairvoyant_episode, per_episode
from mara.bounds.clairvoyant_k_model import (
    build_model,
    cut_windows,
    group_of,
    hint_search,
    relaxed_on_windows,
    replay_in_simulator,
)
from mara.bounds.cpsat import stop_at_bound, time_components
from mara.bounds.simulate_k import fifo_episode, heuristic_schedule, simulate_k

__all__ = ["clairvoyant_k_episode", "clairvoyant_k_batch", "simulate_k", "NEVER"]


def _solve_group_k(cp_model, b, d, q, n_nodes, max_active, time_limit_s, use_heuristics=True, node_speed=None):
    """One time-connected group (local arrays, index = arrival order).

    Returns (chosen bool[n], best, bound, optimal)."""
    n = len(b)
    deadline_t = time.perf_counter() + time_limit_s
    g = group_of(b, d, q, n_nodes, max_active, node_speed)
    if g.alive.sum(axis=0).max() <= g.K and not g.hetero:  # (with speeds the K-relaxed model is only a bound)
        # never more than K tasks alive: admission is immediate, the K-relaxed answer is exact
        rel = clairvoyant_episode(b, d, q, n_nodes=g.M, time_limit_s=time_limit_s, node_speed=node_speed)
        return rel.chosen, rel.successes, rel.upper_bound, rel.optimal
    cut_windows(g)
    rel = relaxed_on_windows(g, time_limit_s)
    U = rel.upper_bound
    if U == 0:
        return np.zeros(n, bool), 0, 0, True

    if use_heuristics:
        ok, steps, adm_h = heuristic_schedule(b, d, q, g.M, g.K, [g.cand, rel.chosen & g.cand], node_speed)
    else:  # testing hook: the model alone (no incumbent, no hint)
        ok, steps, adm_h = np.zeros(n, dtype=bool), [[] for _ in range(n)], np.full(n, -1)
    lb = int(ok.sum())
    if lb >= U:
        return ok, lb, lb, True

    m = build_model(cp_model, g)
    zs = [m.z[k] for k in sorted(m.z)]
    if not zs:
        return np.zeros(n, bool), 0, 0, True
    m.model.Add(sum(zs) <= U)
    m.model.Maximize(sum(zs))
    if use_heuristics:
        hint_search(m, ok, steps, adm_h)

    solver = cpsat.solver(deadline_t - time.perf_counter())
    solver.parameters.cp_model_probing_level = 0  # probing cost more than it saved (measured)
    stop = stop_at_bound(zs, U)
    status = solver.Solve(m.model, stop)
    bound = U
    chosen = ok
    if status in (cp_model.OPTIMAL, cp_model.FEASIBLE):
        sol = np.zeros(n, dtype=bool)
        for k, v in m.z.items():
            sol[k] = bool(solver.Value(v))
        if sol.sum() > chosen.sum():
            chosen = replay_in_simulator(m, g, solver, sol)  # realise it (module docstring)
        if status == cp_model.OPTIMAL or stop.hit:
            bound = int(chosen.sum())
        else:
            bb = solver.BestObjectiveBound()
            if np.isfinite(bb):
                bound = min(bound, int(np.floor(bb + 1e-6)))
    best = int(chosen.sum())
    bound = max(bound, best)
    return chosen, best, bound, best == bound


def clairvoyant_k_episode(
    arrival,
    deadline,
    need,
    n_nodes: int = 7,
    max_active: int = 10,
    time_limit_s: float = 10.0,
    *,
    _use_heuristics: bool = True,
    node_speed=None,
) -> ClairvoyantResult:
    """Best success count of one episode (1-D int arrays over its tasks) under the admission
    limit ``max_active`` (FIFO, eager), every need known.  ``time_limit_s`` is the episode budget.
    ``node_speed`` (M positive ints): the speed-capacity relaxation (module docstring), a bound.
    (``_use_heuristics=False`` is a testing hook: the CP-SAT model alone, without incumbent or hint.)"""
    cp_model = cpsat.cp_model()
    t_start = time.perf_counter()
    b, d, q = fifo_episode(arrival, deadline, need)
    if n_nodes < 0:
        raise ValueError("n_nodes must be >= 0")
    if max_active < 1:
        raise ValueError("max_active must be >= 1")
    n = len(b)
    groups = [np.sort(g) for g in time_components(b, d, np.arange(n))] if n and n_nodes > 0 else []

    def solve_group(g, left, groups_left):
        share = max(left / groups_left, 1e-3)
        return _solve_group_k(
            cp_model,
            b[g],
            d[g],
            q[g],
            n_nodes,
            max_active,
            share,
            use_heuristics=_use_heuristics,
            node_speed=node_speed,
        )

    return by_groups(n, groups, solve_group, time_limit_s, t_start)


def clairvoyant_k_batch(
    arrival, deadline, need, n_tasks, n_nodes: int = 7, node_speed=None, **episode_kw
) -> list[ClairvoyantResult]:
    """Per-episode :func:`clairvoyant_k_episode` over padded ``[E, N]`` arrays; ``episode_kw``: its other settings
    (``max_active``, ``time_limit_s`` per episode). ``node_speed`` is checked once, before any episode."""
    if node_speed is not None:
        node_speed = [int(v) for v in node_speed]
        if len(node_speed) != n_nodes or min(node_speed) < 1:
            raise ValueError(f"node_speed must be {n_nodes} positive integers, got {node_speed}")
    return per_episode(
        lambda b, d, q: clairvoyant_k_episode(b, d, q, n_nodes, node_speed=node_speed, **episode_kw),
        arrival,
        deadline,
        need,
        n_tasks,
    )
