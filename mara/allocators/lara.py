"""LARA adapted to M identical discrete nodes (paper §5.1, design note ``LARA.md``).

Each step, per episode:

1. **Warm / cold.** A present task with ``n_obs >= warm_obs`` (4) is *warm*: its demand is the
   predictor's ``obs.pred_remaining`` (WLS for LARA, FM for LARA-FM; the simulator computes it and
   counts it down with service). Tasks with fewer observations are *cold*: no usable estimate.
2. **Reserve.** If a cold task is present, ``cold_reserve`` (≤ 1) node is reserved for the cold task
   with the earliest deadline (``cold_order``).
3. **Plan.** With integer demands ``p_k = max(min_demand, ⌈p̂_k⌉)`` and ``τ_k = obs.remaining_time``
   (steps t..deadline−1 are executable), find the largest set S of warm tasks that is feasible on
   ``m = M − reserved`` nodes (``plan_nodes``), one node per task per step::

       Σ_{k∈S} max(0, p_k − max(0, τ_k − T)) ≤ m·T   for every T ≥ 0          (``feasible``)

   by the include-first binary-tree search over the tasks in deadline order with bound pruning
   (``largest_feasible_set``).
4. **Dispatch.** S least-laxity first (laxity ``τ − p``; ties: earlier deadline, then arrival), one
   node per task, on the ``m`` planned nodes.
5. **Leftover.** Nodes still free go through the ``leftover`` stages in order: ``warm_least_laxity``
   (remaining warm tasks, least laxity first), ``warm_edf`` (remaining warm tasks, earliest deadline
   first), ``cold_edf`` (remaining cold tasks, earliest deadline first). An empty list leaves them idle.

Re-planned from scratch every step. Time convention: the simulator executes a task at steps
t..deadline−1, so ``τ = deadline − t`` (``obs.remaining_time``); LARA.md's ``d − t + 1`` counts a
deadline step the simulator does not run. Measured on the default bank (p = 0.04–0.12) the whole
candidate set is almost always feasible, so the tree search rarely runs; ``n_searches`` counts it. Tasks that have
exhausted their generation cap (``cap_remaining == 0``) can never succeed and are skipped when ``skip_exhausted``.

On heterogeneous nodes / with switch costs the selection above is unchanged (the plan still
counts M unit-speed nodes, a conservative capacity) and the picks, in dispatch order, are placed by
``mara.allocators.placement.place`` with ``p`` as the remaining demand.

The math is in pure functions (``feasible``, ``breakpoints``, ``largest_feasible_set``,
``least_laxity_order``); ``LARA`` vectorises everything over episodes except the tree search, which
runs only for episodes whose whole warm set (after dropping individually infeasible tasks) is
infeasible.
"""

from __future__ import annotations

from typing import Sequence

import numpy as np

from mara.allocators.placement import place
from mara.sim.env import IDLE, WARMUP_OBS, Observation

LEFTOVER_STAGES = ("warm_least_laxity", "warm_edf", "cold_edf")
COLD_ORDERS = ("edf", "fifo")
PLAN_NODES = ("available", "all")
DISPATCH = ("least_laxity", "edf")


# ---------------------------------------------------------------------------------------- pure math
def breakpoints(p: np.ndarray, tau: np.ndarray) -> np.ndarray:
    """Sorted unique T ∈ {0} ∪ {τ_k} ∪ {τ_k − p_k} (those ≥ 0) at which the feasibility test is checked."""
    p = np.asarray(p, dtype=np.int64).ravel()
    tau = np.asarray(tau, dtype=np.int64).ravel()
    T = np.concatenate([[0], tau, tau - p])
    return np.unique(T[T >= 0])


def demand_profile(p: np.ndarray, tau: np.ndarray, T: np.ndarray) -> np.ndarray:
    """Work each task must still do in steps [0, T) no matter what: ``max(0, p − max(0, τ − T))``.

    p, tau [n] int, T [J] int -> [n, J] int.
    """
    p = np.asarray(p, dtype=np.int64)[:, None]
    tau = np.asarray(tau, dtype=np.int64)[:, None]
    T = np.asarray(T, dtype=np.int64)[None, :]
    return np.maximum(0, p - np.maximum(0, tau - T))


def feasible(p: Sequence[int], tau: Sequence[int], m: int) -> bool:
    """Can tasks with demands p (batches) and windows τ (steps 0..τ−1) all finish on m identical nodes,
    each task using at most one node per step? Exact (min-cut argument; checked at the breakpoints)."""
    p = np.asarray(p, dtype=np.int64).ravel()
    tau = np.asarray(tau, dtype=np.int64).ravel()
    if p.size == 0:
        return True
    if m <= 0:
        return bool(np.all(p <= 0))
    T = breakpoints(p, tau)
    return bool(np.all(demand_profile(p, tau, T).sum(axis=0) <= m * T))


def largest_feasible_set(p: Sequence[int], tau: Sequence[int], m: int) -> np.ndarray:
    """Largest feasible subset of tasks (bool mask [n]) by LARA's binary-tree search.

    Tasks are visited in deadline order (τ ascending, ties by index); the include branch is explored
    first, the exclude branch second; an include is pruned when it breaks feasibility (feasibility is
    monotone under removal) and a subtree is pruned when even taking every remaining task cannot beat
    the incumbent. The result is therefore the lexicographically first (include-first, deadline order)
    feasible set of maximum size.
    """
    p = np.asarray(p, dtype=np.int64).ravel()
    tau = np.asarray(tau, dtype=np.int64).ravel()
    n = p.size
    best = np.zeros(n, dtype=bool)
    if n == 0 or m <= 0:
        best[:] = p <= 0
        return best
    T = breakpoints(p, tau)
    order = np.lexsort((np.arange(n), tau))
    D = demand_profile(p, tau, T)[order]  # [n, J] in visit order
    cap = m * T
    # tasks that cannot fit even alone never enter the tree
    alone = np.all(D <= cap[None, :], axis=1)
    idx = [int(i) for i in np.flatnonzero(alone)]
    rows = [D[i].tolist() for i in idx]
    capl = cap.tolist()
    J = len(capl)
    nn = len(idx)
    best_set: list[int] = []
    cur: list[int] = []

    def dfs(i: int, load: list[int]) -> None:
        nonlocal best_set
        if len(cur) + (nn - i) <= len(best_set):
            return  # bound: cannot beat the incumbent
        if i == nn:
            best_set = list(cur)
            return
        r = rows[i]
        new = [load[j] + r[j] for j in range(J)]
        if all(new[j] <= capl[j] for j in range(J)):
            cur.append(i)
            dfs(i + 1, new)
            cur.pop()
        dfs(i + 1, load)

    dfs(0, [0] * J)
    for i in best_set:
        best[order[idx[i]]] = True
    return best


def least_laxity_order(p: np.ndarray, tau: np.ndarray) -> np.ndarray:
    """Indices sorted by laxity τ − p, ties by earlier deadline (smaller τ), then index."""
    p = np.asarray(p, dtype=np.int64)
    tau = np.asarray(tau, dtype=np.int64)
    return np.lexsort((np.arange(p.size), tau, tau - p))


# ---------------------------------------------------------------------------------------- allocator
def _fill(stage_mask, keys, limit, taken, picks, used):
    """Vectorised stage: per episode take up to ``limit`` untaken slots of ``stage_mask`` with the smallest
    keys (lexicographic, first key most significant). Mutates taken [E, K] and picks [E, M] / used [E]."""
    E, K = stage_mask.shape
    elig = stage_mask & ~taken
    if not elig.any():
        return
    order = np.lexsort(tuple(reversed(keys)) + (~elig,), axis=-1)
    # lexsort: last key is primary -> ~elig primary (eligible first), then keys[0], keys[1], ...
    ok = np.take_along_axis(elig, order, axis=1)
    rank = np.arange(K)[None, :]
    take = ok & (rank < np.asarray(limit)[:, None])
    rows, cols = np.nonzero(take)
    slots = order[rows, cols]
    pos = used[rows] + cols  # eligible slots come first, so cols counts within the stage
    picks[rows, pos] = slots
    taken[rows, slots] = True
    np.add.at(used, rows, 1)


class LARA:
    """LARA on M identical discrete nodes (see module docstring; options mirror ``conf/method/LARA.yaml``)."""

    name = "LARA"

    def __init__(
        self,
        warm_obs: int = WARMUP_OBS,
        cold_reserve: int = 1,
        cold_order: str = "edf",
        plan_nodes: str = "available",
        dispatch: str = "least_laxity",
        leftover: Sequence[str] | str | None = ("warm_least_laxity", "cold_edf"),
        min_demand: int = 1,
        skip_exhausted: bool = True,
        name: str | None = None,
    ) -> None:
        if isinstance(leftover, str):
            leftover = [] if leftover == "idle" else [leftover]
        leftover = list(leftover or [])
        bad = [s for s in leftover if s not in LEFTOVER_STAGES]
        if bad:
            raise ValueError(f"LARA.leftover stages must be among {LEFTOVER_STAGES} (or 'idle'), got {bad}")
        if cold_order not in COLD_ORDERS:
            raise ValueError(f"LARA.cold_order must be one of {COLD_ORDERS}, got {cold_order!r}")
        if plan_nodes not in PLAN_NODES:
            raise ValueError(f"LARA.plan_nodes must be one of {PLAN_NODES}, got {plan_nodes!r}")
        if dispatch not in DISPATCH:
            raise ValueError(f"LARA.dispatch must be one of {DISPATCH}, got {dispatch!r}")
        if cold_reserve not in (0, 1):
            raise ValueError(f"LARA.cold_reserve must be 0 or 1 (paper: at most one node), got {cold_reserve}")
        if warm_obs < 1 or min_demand < 0:
            raise ValueError("LARA.warm_obs must be >= 1 and min_demand >= 0")
        self.warm_obs, self.cold_reserve, self.cold_order = int(warm_obs), int(cold_reserve), cold_order
        self.plan_nodes, self.dispatch, self.leftover = plan_nodes, dispatch, leftover
        self.min_demand, self.skip_exhausted = int(min_demand), bool(skip_exhausted)
        if name:
            self.name = name
        self.n_searches = 0  # episodes-steps that needed the tree search (diagnostic)

    def reset(self, n_episodes: int) -> None:
        self.n_searches = 0

    # -------------------------------------------------------------------------------- planning
    def plan(self, p: np.ndarray, tau: np.ndarray, warm: np.ndarray, m: np.ndarray) -> np.ndarray:
        """Largest predicted-feasible warm set per episode. p, tau [E, K] int, warm [E, K] bool, m [E] int
        -> S [E, K] bool. Fast paths (vectorised): the whole candidate set is feasible."""
        E, K = p.shape
        cand = warm & (p <= tau) & (m[:, None] > 0)  # a task that cannot fit alone is never in S
        # breakpoints of every candidate (superset of each subset's breakpoints: checking more T is exact)
        T = np.concatenate(
            [np.zeros((E, 1), np.int64), np.where(cand, tau, 0), np.where(cand, np.maximum(tau - p, 0), 0)], axis=1
        )
        D = np.maximum(0, p[:, :, None] - np.maximum(0, tau[:, :, None] - T[:, None, :]))  # [E, K, J]
        load = np.where(cand[:, :, None], D, 0).sum(axis=1)  # [E, J]
        ok = np.all(load <= m[:, None] * T, axis=1)
        S = cand.copy()
        for e in np.flatnonzero(~ok):
            ks = np.flatnonzero(cand[e])
            self.n_searches += 1
            sel = largest_feasible_set(p[e, ks], tau[e, ks], int(m[e]))
            S[e] = False
            S[e, ks[sel]] = True
        return S

    # -------------------------------------------------------------------------------- acting
    def act(self, obs: Observation) -> np.ndarray:
        return place(obs, *self.choose(obs))  # placement on heterogeneous nodes (identity otherwise)

    def choose(self, obs: Observation) -> tuple[np.ndarray, np.ndarray]:
        """(picks [E, M] in priority order, the integer demand p the placement reads); ``act`` places them."""
        E, K = obs.present.shape
        M = obs.n_nodes
        present = obs.present.copy()
        if self.skip_exhausted:
            present &= obs.cap_remaining > 0
        warm = present & (obs.n_obs >= self.warm_obs)
        cold = present & ~warm
        tau = obs.remaining_time.astype(np.int64)
        p = np.ceil(np.asarray(obs.pred_remaining, dtype=np.float64) - 1e-9)
        p = np.maximum(np.nan_to_num(p, nan=np.inf, posinf=1e9), self.min_demand)
        p = np.minimum(p, 1e9).astype(np.int64)
        lax = tau - p
        dl = obs.deadline.astype(np.int64)
        arr = obs.task.astype(np.int64)  # task index = arrival order

        taken = np.zeros((E, K), dtype=bool)
        picks = np.full((E, M), IDLE, dtype=np.int64)
        used = np.zeros(E, dtype=np.int64)

        # 1. reserve: at most one node for the most urgent cold task
        reserve = np.where(cold.any(axis=1), min(self.cold_reserve, M), 0)
        if self.cold_reserve:
            ckeys = [dl, arr] if self.cold_order == "edf" else [arr]
            _fill(cold, ckeys, reserve, taken, picks, used)
        # 2. plan on the remaining nodes
        m = np.full(E, M, dtype=np.int64)
        if self.plan_nodes == "available":
            m = m - reserve
        S = self.plan(p, tau, warm, m)
        # 3. dispatch S
        skeys = [lax, dl, arr] if self.dispatch == "least_laxity" else [dl, arr]
        _fill(S, skeys, np.minimum(M - used, m), taken, picks, used)
        # 4. leftovers
        for stage in self.leftover:
            if stage == "warm_least_laxity":
                _fill(warm, [lax, dl, arr], M - used, taken, picks, used)
            elif stage == "warm_edf":
                _fill(warm, [dl, arr], M - used, taken, picks, used)
            else:  # cold_edf
                _fill(cold, [dl, arr], M - used, taken, picks, used)
        return picks, p
