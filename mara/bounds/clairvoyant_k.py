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
from dataclasses import dataclass
from typing import Callable, Sequence

import numpy as np

from mara.bounds import cpsat
from mara.bounds.clairvoyant import NEVER, ClairvoyantResult, clairvoyant_episode, per_episode
from mara.bounds.cpsat import stop_at_bound, time_components

__all__ = ["clairvoyant_k_episode", "clairvoyant_k_batch", "simulate_k", "NEVER"]


def _check(arrival, deadline, need):
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


# --------------------------------------------------------------------------- exact simulator


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
    b, d, q = _check(arrival, deadline, need)
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


def _heuristics(b, d, q, n_nodes, max_active, target_sets, node_speed=None):
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


# --------------------------------------------------------------------------- admission bounds


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


def _admission_window(b, d, q, K, cand):
    """Valid bounds on every task's admission step ``A_k`` in any run of the simulator.

    ``early[k]``: admissions when each task leaves as early as it could (a candidate after
    ``need_k`` steps of service, others at ``d_k``) -- since earlier departures never delay a FIFO
    admission (module docstring), no run admits ``k`` before ``early[k]``, and none admits it at all
    if ``early[k] = -1``.  ``late[k]``: admissions when nobody ever succeeds -- no run admits ``k``
    later (when ``late[k] >= 0``).
    """
    return _admissions(b, d, q, K, cand), _admissions(b, d, q, K, np.zeros(len(b), dtype=bool))


# --------------------------------------------------------------------------- exact model


@dataclass
class _Group:
    """One time-connected group of tasks (local arrays, index = arrival order) and what the model derives from it."""

    b: np.ndarray  # [n] arrival step
    d: np.ndarray  # [n] deadline
    q: np.ndarray  # [n] need (batches)
    M: int
    K: int
    node_speed: list | None
    classes: list  # [(speed, nodes)] speed classes, fastest first (empty on identical nodes)
    qs: np.ndarray  # [n] least served steps to complete (== q on identical nodes)
    t0: int
    t1: int
    alive: np.ndarray  # [n, T] bool: b_k <= t < d_k, T = t1 - t0
    cand: np.ndarray  # [n] bool: can still succeed
    early: np.ndarray | None = None  # [n] admission window (module docstring), -1: never admitted / no latest step
    late: np.ndarray | None = None

    @property
    def hetero(self) -> bool:
        return self.node_speed is not None


def _group(b, d, q, n_nodes, max_active, node_speed) -> _Group:
    """The group's speed classes, least served steps, alive grid and first candidates (no admission window yet)."""
    n = len(b)
    hetero = node_speed is not None
    unit = 1 if not hetero else int(max(node_speed))
    classes = [] if not hetero else [(int(v), int(c)) for v, c in zip(*np.unique(node_speed, return_counts=True))][::-1]
    qs = -(-q // unit)
    t0, t1 = int(b.min()), int(d.max())
    alive = np.zeros((n, t1 - t0), dtype=bool)
    for k in range(n):
        alive[k, b[k] - t0 : d[k] - t0] = True
    return _Group(b, d, q, n_nodes, max_active, node_speed, classes, qs, t0, t1, alive, qs <= d - b)


def _cut_windows(g: _Group) -> None:
    """Admission windows from monotonicity (module docstring); tasks that can never be admitted in time drop out."""
    g.early, g.late = _admission_window(g.b, g.d, g.qs, g.K, g.cand)
    g.cand = g.cand & (g.early >= 0) & (g.early <= g.d - g.qs)


def _relaxed_on_windows(g: _Group, time_limit_s: float) -> ClairvoyantResult:
    """The K-relaxed optimum with every window cut to [early_k, d_k): a valid bound ``U`` on the group."""
    eb = np.where(g.early >= 0, g.early, g.b)
    return clairvoyant_episode(
        eb,
        g.d,
        np.where(g.cand, g.q, NEVER),
        n_nodes=g.M,
        time_limit_s=max(time_limit_s / 3, 0.05),
        node_speed=g.node_speed,
    )


@dataclass
class _ModelK:
    """The time-indexed CP-SAT model of a group and its literals (keys (k, t) with t absolute)."""

    model: object
    one: object
    zero: object
    adm: dict  # (k, t) -> admitted at or before t (a constant where the window fixes it)
    fin: dict  # (k, t) -> released after step t (candidates only)
    x: dict  # (k, t) -> served at t
    y: dict  # (k, t, c) -> served at t on speed class c (heterogeneous nodes)
    z: dict  # k -> succeeds


def _admission_literals(m: _ModelK, g: _Group) -> None:
    """``adm[k, t]``, monotone in t: 0 before ``early_k``, 1 from where task k cannot be waiting (at most K tasks of
    index <= k alive, or from ``late_k`` on), a variable in between."""
    model, one, zero = m.model, m.one, m.zero
    t0 = g.t0
    sure = g.alive & (np.cumsum(g.alive, axis=0) <= g.K)  # k cannot be waiting at t
    for k in range(len(g.b)):
        if g.late[k] >= 0:
            sure[k, g.late[k] - t0 : g.d[k] - t0] = True
    for k in range(len(g.b)):
        fixed = False
        for t in range(int(g.b[k]), int(g.d[k])):
            if g.early[k] < 0 or t < g.early[k]:
                m.adm[k, t] = zero
            elif fixed or sure[k, t - t0]:
                fixed = True
                m.adm[k, t] = one
            else:
                m.adm[k, t] = model.NewBoolVar(f"a{k}_{t}")
        prev = None
        for t in range(int(g.b[k]), int(g.d[k])):
            v = m.adm[k, t]
            if prev is not None and v is not one and prev is not zero:
                model.AddImplication(prev, v)
            prev = v


def _completion_and_service(m: _ModelK, g: _Group) -> None:
    """Per candidate: ``fin`` (monotone, implies admission ``qs_k`` steps earlier), ``z_k = fin[k, d_k - 1]``, service
    ``x`` only while admitted and not released, and the batches it must receive (per speed class on heterogeneous
    nodes, where a completing step may overshoot)."""
    model = m.model
    for k in np.flatnonzero(g.cand):
        k = int(k)
        first = int(g.early[k] + g.qs[k] - 1)
        prev = None
        for t in range(first, int(g.d[k])):
            v = model.NewBoolVar(f"f{k}_{t}")
            m.fin[k, t] = v
            if prev is not None:
                model.AddImplication(prev, v)
            prev = v
            a = m.adm[k, t - int(g.qs[k]) + 1]
            if a is not m.one:
                model.AddImplication(v, a)  # never zero: t - need_k + 1 >= early_k
        m.z[k] = m.fin[k, int(g.d[k]) - 1]
        xs = []
        for t in range(int(g.early[k]), int(g.d[k])):
            v = model.NewBoolVar(f"x{k}_{t}")
            m.x[k, t] = v
            xs.append(v)
            if m.adm[k, t] is not m.one:
                model.AddImplication(v, m.adm[k, t])
            f = m.fin.get((k, t - 1))
            if f is not None:
                model.AddImplication(v, f.Not())
        if g.hetero:  # served on a node of one speed class; batches = that speed (a completing step may overshoot)
            got = []
            for t in range(int(g.early[k]), int(g.d[k])):
                vs = [model.NewBoolVar(f"v{k}_{t}_{c}") for c in range(len(g.classes))]
                for c, v in enumerate(vs):
                    m.y[k, t, c] = v
                    got.append(g.classes[c][0] * v)
                model.Add(sum(vs) == m.x[k, t])
                model.AddImplication(m.x[k, t], m.z[k])  # w.l.o.g. a failing task gets no service
            model.Add(sum(got) >= int(g.q[k]) * m.z[k])
        else:
            model.Add(sum(xs) == int(g.q[k]) * m.z[k])


def _step_rows(m: _ModelK, g: _Group) -> None:
    """Per step: at most M served (n_c per speed class); where more than K tasks are alive at most K hold a slot,
    a task waits only if all K are held (eagerness), and admission follows arrival order (FIFO)."""
    model, one, zero = m.model, m.one, m.zero

    def occupancy(t):  # occ[k, t] = adm[k, t] - fin[k, t - 1] over the tasks alive at t
        terms = [(m.adm[int(k), t], m.fin.get((int(k), t - 1))) for k in np.flatnonzero(g.alive[:, t - g.t0])]
        return sum((1 if a is one else a) for a, _ in terms if a is not zero) - sum(
            f for _, f in terms if f is not None
        )

    for t in range(g.t0, g.t1):
        col = g.alive[:, t - g.t0]
        xs_t = [m.x[int(k), t] for k in np.flatnonzero(col & g.cand) if (int(k), t) in m.x]
        if len(xs_t) > g.M:
            model.Add(sum(xs_t) <= g.M)
        if g.hetero:
            for c, (_, n_c) in enumerate(g.classes):  # at most n_c tasks on the nodes of speed class c
                vs = [m.y[int(k), t, c] for k in np.flatnonzero(col & g.cand) if (int(k), t, c) in m.y]
                if len(vs) > n_c:
                    model.Add(sum(vs) <= n_c)
        if col.sum() > g.K:
            model.Add(occupancy(t) <= g.K)
            waiters = [m.adm[int(k), t] for k in np.flatnonzero(col) if m.adm[int(k), t] is not one]
            if waiters:
                full = model.NewBoolVar(f"full{t}")
                model.Add(occupancy(t) >= g.K).OnlyEnforceIf(full)
                for a in waiters:
                    model.AddBoolOr([a, full])
                # FIFO: admitted only after every earlier task still alive at t
                alive_ks = [int(k) for k in np.flatnonzero(col)]
                for i in range(1, len(alive_ks)):
                    a = m.adm[alive_ks[i], t]
                    p = m.adm[alive_ks[i - 1], t]
                    if a is not one and a is not zero and p is not one:
                        model.AddImplication(a, p)
                    elif a is one and p is not one:
                        model.Add(p == 1)


def _build_model(cp_model, g: _Group) -> _ModelK:
    """The exact time-indexed model of the group (module docstring), objective not yet set."""
    model = cp_model.CpModel()
    m = _ModelK(model, model.NewConstant(1), model.NewConstant(0), {}, {}, {}, {}, {})
    _admission_literals(m, g)
    _completion_and_service(m, g)
    _step_rows(m, g)
    return m


def _hint(m: _ModelK, ok, steps, adm_h) -> None:
    """Start the search from the best heuristic schedule (services, admissions, completions)."""
    served_at = [set(s) for s in steps]
    for (k, t), v in m.adm.items():
        if v is not m.one and v is not m.zero:
            m.model.AddHint(v, bool(adm_h[k] >= 0 and adm_h[k] <= t))
    for (k, t), v in m.x.items():
        m.model.AddHint(v, bool(ok[k] and t in served_at[k]))
    for (k, t), v in m.fin.items():
        m.model.AddHint(v, bool(ok[k] and steps[k] and steps[k][-1] <= t))


def _replay(m: _ModelK, g: _Group, solver, sol) -> np.ndarray:
    """Run the model's services in the simulator (:func:`simulate_k`) -> the successes it realises [n] bool. With
    speeds each step's tasks go fastest class first, so each gets at least the speed the model gave it."""
    plan = {}
    for (k, t), v in m.x.items():
        if sol[k] and solver.Value(v):
            c = next((c for c in range(len(g.classes)) if solver.Value(m.y[k, t, c])), 0) if g.hetero else 0
            plan.setdefault(t, []).append((c, k))
    plan = {t: [k for _, k in sorted(v)] for t, v in plan.items()}
    real, _, _ = simulate_k(
        g.b, g.d, g.q, g.M, g.K, lambda t, active, served: [k for k in plan.get(t, ()) if k in active], g.node_speed
    )
    assert real[sol].all(), "Clairvoyant-K: a model schedule did not replay in the simulator"
    return real


def _solve_group_k(cp_model, b, d, q, n_nodes, max_active, time_limit_s, use_heuristics=True, node_speed=None):
    """One time-connected group (local arrays, index = arrival order).

    Returns (chosen bool[n], best, bound, optimal)."""
    n = len(b)
    deadline_t = time.perf_counter() + time_limit_s
    g = _group(b, d, q, n_nodes, max_active, node_speed)
    if g.alive.sum(axis=0).max() <= g.K and not g.hetero:  # (with speeds the K-relaxed model is only a bound)
        # never more than K tasks alive: admission is immediate, the K-relaxed answer is exact
        rel = clairvoyant_episode(b, d, q, n_nodes=g.M, time_limit_s=time_limit_s, node_speed=node_speed)
        return rel.chosen, rel.successes, rel.upper_bound, rel.optimal
    _cut_windows(g)
    rel = _relaxed_on_windows(g, time_limit_s)
    U = rel.upper_bound
    if U == 0:
        return np.zeros(n, bool), 0, 0, True

    if use_heuristics:
        ok, steps, adm_h = _heuristics(b, d, q, g.M, g.K, [g.cand, rel.chosen & g.cand], node_speed)
    else:  # testing hook: the model alone (no incumbent, no hint)
        ok, steps, adm_h = np.zeros(n, dtype=bool), [[] for _ in range(n)], np.full(n, -1)
    lb = int(ok.sum())
    if lb >= U:
        return ok, lb, lb, True

    m = _build_model(cp_model, g)
    zs = [m.z[k] for k in sorted(m.z)]
    if not zs:
        return np.zeros(n, bool), 0, 0, True
    m.model.Add(sum(zs) <= U)
    m.model.Maximize(sum(zs))
    if use_heuristics:
        _hint(m, ok, steps, adm_h)

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
            chosen = _replay(m, g, solver, sol)  # realise it (module docstring)
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
    b, d, q = _check(arrival, deadline, need)
    if n_nodes < 0:
        raise ValueError("n_nodes must be >= 0")
    if max_active < 1:
        raise ValueError("max_active must be >= 1")
    n = len(b)
    chosen = np.zeros(n, dtype=bool)
    best = bound = 0
    optimal = True
    if n and n_nodes > 0:
        groups = [np.sort(g) for g in time_components(b, d, np.arange(n))]
        for gi, g in enumerate(groups):
            left = time_limit_s - (time.perf_counter() - t_start)
            share = max(left / (len(groups) - gi), 1e-3)
            ch, gb, gu, gopt = _solve_group_k(
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


def clairvoyant_k_batch(
    arrival,
    deadline,
    need,
    n_tasks,
    n_nodes: int = 7,
    max_active: int = 10,
    time_limit_s: float = 10.0,
    node_speed=None,
) -> list[ClairvoyantResult]:
    """Per-episode :func:`clairvoyant_k_episode` over padded ``[E, N]`` arrays; ``time_limit_s`` per episode."""
    if node_speed is not None:
        node_speed = [int(v) for v in node_speed]
        if len(node_speed) != n_nodes or min(node_speed) < 1:
            raise ValueError(f"node_speed must be {n_nodes} positive integers, got {node_speed}")
    return per_episode(
        lambda b, d, q: clairvoyant_k_episode(b, d, q, n_nodes, max_active, time_limit_s, node_speed=node_speed),
        arrival,
        deadline,
        need,
        n_tasks,
    )
