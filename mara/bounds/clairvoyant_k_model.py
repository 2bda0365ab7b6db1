"""The time-indexed CP-SAT model of the Clairvoyant-K bound over one time-connected group of tasks.

Formulation, admission windows and the proof that the model is exact: :mod:`mara.bounds.clairvoyant_k`'s
docstring.  :func:`build_model` writes the model, :func:`hint_search` starts it from a heuristic
schedule, :func:`replay_in_simulator` realises a solution in :func:`~mara.bounds.simulate_k.simulate_k`.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from mara.bounds.clairvoyant import NEVER, ClairvoyantResult, clairvoyant_episode
from mara.bounds.simulate_k import admission_window, simulate_k


@dataclass
class Group:
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
    early: np.ndarray | None = (
        None  # [n] admission window (:mod:`mara.bounds.clairvoyant_k`), -1: never admitted / no latest step
    )
    late: np.ndarray | None = None

    @property
    def hetero(self) -> bool:
        return self.node_speed is not None


def group_of(b, d, q, n_nodes, max_active, node_speed) -> Group:
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
    return Group(b, d, q, n_nodes, max_active, node_speed, classes, qs, t0, t1, alive, qs <= d - b)


def cut_windows(g: Group) -> None:
    """Admission windows from monotonicity (:mod:`mara.bounds.clairvoyant_k`); tasks never admitted in time drop out."""
    g.early, g.late = admission_window(g.b, g.d, g.qs, g.K, g.cand)
    g.cand = g.cand & (g.early >= 0) & (g.early <= g.d - g.qs)


def relaxed_on_windows(g: Group, time_limit_s: float) -> ClairvoyantResult:
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
class ModelK:
    """The time-indexed CP-SAT model of a group and its literals (keys (k, t) with t absolute)."""

    model: object
    one: object
    zero: object
    adm: dict  # (k, t) -> admitted at or before t (a constant where the window fixes it)
    fin: dict  # (k, t) -> released after step t (candidates only)
    x: dict  # (k, t) -> served at t
    y: dict  # (k, t, c) -> served at t on speed class c (heterogeneous nodes)
    z: dict  # k -> succeeds


def _admission_literals(m: ModelK, g: Group) -> None:
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


def _completion_and_service(m: ModelK, g: Group) -> None:
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


def _step_rows(m: ModelK, g: Group) -> None:
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


def build_model(cp_model, g: Group) -> ModelK:
    """The exact time-indexed model of the group (:mod:`mara.bounds.clairvoyant_k`), objective not yet set."""
    model = cp_model.CpModel()
    m = ModelK(model, model.NewConstant(1), model.NewConstant(0), {}, {}, {}, {}, {})
    _admission_literals(m, g)
    _completion_and_service(m, g)
    _step_rows(m, g)
    return m


def hint_search(m: ModelK, ok, steps, adm_h) -> None:
    """Start the search from the best heuristic schedule (services, admissions, completions)."""
    served_at = [set(s) for s in steps]
    for (k, t), v in m.adm.items():
        if v is not m.one and v is not m.zero:
            m.model.AddHint(v, bool(adm_h[k] >= 0 and adm_h[k] <= t))
    for (k, t), v in m.x.items():
        m.model.AddHint(v, bool(ok[k] and t in served_at[k]))
    for (k, t), v in m.fin.items():
        m.model.AddHint(v, bool(ok[k] and steps[k] and steps[k][-1] <= t))


def replay_in_simulator(m: ModelK, g: Group, solver, sol) -> np.ndarray:
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
