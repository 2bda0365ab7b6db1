"""Clairvoyant: exact best success count with every need known (K relaxed)."""

from __future__ import annotations

import itertools
import sys
from collections import deque

import numpy as np
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

pytest.importorskip("ortools")

from mara.bounds.clairvoyant import (  # noqa: E402
    NEVER,
    ClairvoyantResult,
    clairvoyant_batch,
    clairvoyant_episode,
    feasible_schedule,
    independent_feasible,
)

# ----------------------------------------------------------------------------- independent checks


def _edmonds_karp(n, cap, s, t):
    """Plain Edmonds-Karp on a dense capacity matrix (list of dicts)."""
    flow = 0
    while True:
        parent = {s: None}
        dq = deque([s])
        while dq and t not in parent:
            u = dq.popleft()
            for v, c in cap[u].items():
                if c > 0 and v not in parent:
                    parent[v] = u
                    dq.append(v)
        if t not in parent:
            return flow
        f, v = float("inf"), t
        while parent[v] is not None:
            f = min(f, cap[parent[v]][v])
            v = parent[v]
        v = t
        while parent[v] is not None:
            u = parent[v]
            cap[u][v] -= f
            cap[v][u] = cap[v].get(u, 0) + f
            v = u
        flow += f


def subset_feasible(arrival, deadline, need, subset, m):
    """Task -> step bipartite flow: cap 1 per (task, step in window), m per step."""
    subset = list(subset)
    if not subset:
        return True
    need = np.maximum(np.asarray(need, dtype=np.int64), 1)
    if any(need[k] > deadline[k] - arrival[k] for k in subset):
        return False
    horizon = int(max(deadline[k] for k in subset))
    nt = len(subset)
    s, t = nt + horizon, nt + horizon + 1
    cap = [dict() for _ in range(nt + horizon + 2)]
    for j, k in enumerate(subset):
        cap[s][j] = int(need[k])
        for step in range(int(arrival[k]), int(deadline[k])):
            cap[j][nt + step] = 1
    for step in range(horizon):
        cap[nt + step][t] = m
    return _edmonds_karp(len(cap), cap, s, t) == int(sum(need[k] for k in subset))


def brute_force(arrival, deadline, need, m):
    n = len(arrival)
    for size in range(n, 0, -1):
        for sub in itertools.combinations(range(n), size):
            if subset_feasible(arrival, deadline, need, sub, m):
                return size
    return 0


def check_schedule(sched, arrival, deadline, need, chosen, m):
    """Simulate the schedule step by step."""
    arrival, deadline = np.asarray(arrival), np.asarray(deadline)
    need = np.maximum(np.asarray(need, dtype=np.int64), 1)
    assert sched.shape[1] == m
    got = np.zeros(len(arrival), dtype=np.int64)
    for t, row in enumerate(sched):
        busy = row[row >= 0]
        assert len(busy) == len(set(busy.tolist())), f"task on two nodes at step {t}"
        assert len(busy) <= m
        for k in busy:
            assert arrival[k] <= t < deadline[k], f"task {k} served outside its window at {t}"
            got[k] += 1
    for k in np.flatnonzero(chosen):
        assert got[k] >= need[k], f"chosen task {k} got {got[k]} < {need[k]}"


def greedy_sim(arrival, deadline, need, m, key):
    """Work-conserving simulation (no admission limit); key 'edf' or 'fifo'."""
    arrival, deadline = np.asarray(arrival), np.asarray(deadline)
    need = np.maximum(np.asarray(need, dtype=np.int64), 1)
    n = len(arrival)
    got = np.zeros(n, dtype=np.int64)
    done = np.zeros(n, dtype=bool)
    horizon = int(deadline.max()) if n else 0
    prio = deadline if key == "edf" else arrival
    for t in range(horizon):
        act = [k for k in range(n) if arrival[k] <= t < deadline[k] and not done[k]]
        act.sort(key=lambda k: (prio[k], k))
        for k in act[:m]:
            got[k] += 1
            if got[k] >= need[k]:
                done[k] = True
    return int(done.sum())


def solve_and_verify(arrival, deadline, need, m, **kw):
    r = clairvoyant_episode(arrival, deadline, need, n_nodes=m, **kw)
    assert isinstance(r, ClairvoyantResult)
    assert r.chosen.dtype == bool and r.chosen.shape == (len(arrival),)
    assert r.successes == int(r.chosen.sum()) <= r.upper_bound
    if r.optimal:
        assert r.upper_bound == r.successes
    sched = feasible_schedule(arrival, deadline, need, r.chosen, n_nodes=m)
    check_schedule(sched, arrival, deadline, need, r.chosen, m)
    return r


# ----------------------------------------------------------------------------- hand-worked cases


def test_one_node_three_tasks():
    # A [0,4) need 3, B [0,4) need 2, C [2,6) need 2 on one node: A+B needs 5 slots in [0,4);
    # all three need 7 > 6 slots.  A+C and B+C fit, so the best is 2.
    r = solve_and_verify([0, 0, 2], [4, 4, 6], [3, 2, 2], 1)
    assert r.optimal and r.successes == 2
    assert not r.chosen[0] or not r.chosen[1]


def test_drop_big_task_to_fit_two():
    # One node: the big task fills [0,4); dropping it lets both small tasks succeed.
    r = solve_and_verify([0, 0, 2], [4, 2, 4], [4, 2, 2], 1)
    assert r.successes == 2 and r.chosen.tolist() == [False, True, True]


def test_one_node_per_task_binds():
    # Two nodes, total work 7 <= 8 node-steps and every need <= budget, yet B and C hold both
    # nodes during [0,2) and A (one node at a time) can then get only 2 < 3 batches.
    arrival, deadline, need = [0, 0, 0], [4, 2, 2], [3, 2, 2]
    r = solve_and_verify(arrival, deadline, need, 2)
    assert r.successes == 2 == brute_force(np.array(arrival), np.array(deadline), np.array(need), 2)


def test_oracle_and_never():
    arrival = np.array([0, 0, 5, 5])
    deadline = np.array([10, 3, 9, 20])
    need = np.array([10, 4, NEVER, 0])
    assert independent_feasible(arrival, deadline, need).tolist() == [True, False, False, True]
    r = solve_and_verify(arrival, deadline, need, 7)
    assert r.successes == 2 and r.chosen.tolist() == [True, False, False, True]


def test_empty_and_disjoint_groups():
    r = clairvoyant_episode(np.zeros(0, int), np.zeros(0, int), np.zeros(0, int))
    assert r.successes == 0 and r.optimal and r.chosen.shape == (0,)
    # Two time-disjoint clusters, each on one node with one loser.
    arrival = [0, 0, 100, 100]
    deadline = [5, 5, 105, 105]
    need = [3, 3, 5, 1]
    r = solve_and_verify(arrival, deadline, need, 1)
    assert r.successes == 2 and r.chosen[:2].sum() == 1 and r.chosen[2:].sum() == 1


def test_stress_like_case():
    # 7 hopeless tasks with the earliest deadlines would absorb all 7 nodes under EDF; 13
    # feasible tasks (needs 22..35, budgets ~60, total 366 <= 7*58) all fit when they are ignored.
    needs = [22, 24, 26, 28, 30, 32, 34, 35, 23, 25, 27, 29, 31]
    budgets = [58, 60, 62, 64, 59, 61, 63, 60, 58, 62, 64, 60, 59]
    arrival = np.array([0] * 7 + [10] * 13)
    deadline = np.array([30, 32, 34, 36, 38, 40, 42] + [10 + b for b in budgets])
    need = np.array([NEVER] * 7 + needs)
    r = solve_and_verify(arrival, deadline, need, 7)
    assert r.optimal and r.successes == 13
    assert not r.chosen[:7].any() and r.chosen[7:].all()
    assert independent_feasible(arrival, deadline, need).sum() == 13
    assert greedy_sim(arrival, deadline, need, 7, "edf") < 13


def test_infeasible_chosen_set_rejected():
    with pytest.raises(ValueError):
        feasible_schedule([0, 0], [2, 2], [2, 2], [True, True], n_nodes=1)
    with pytest.raises(ValueError):
        feasible_schedule([0], [2], [3], [True], n_nodes=7)


# ----------------------------------------------------------------------------- brute force


def _tiny(rng):
    n = int(rng.integers(1, 7))
    m = int(rng.integers(1, 4))
    arrival = rng.integers(0, 9, n)
    budget = rng.integers(1, 13 - arrival)  # deadlines <= 12
    deadline = arrival + budget
    need = rng.integers(1, 9, n)
    need[rng.random(n) < 0.1] = NEVER
    return arrival, deadline, need, m


def test_brute_force_tiny():
    rng = np.random.default_rng(20260801)
    for _ in range(60):
        arrival, deadline, need, m = _tiny(rng)
        r = solve_and_verify(arrival, deadline, need, m)
        assert r.optimal
        assert r.successes == brute_force(arrival, deadline, need, m), (arrival, deadline, need, m)
        assert subset_feasible(arrival, deadline, need, np.flatnonzero(r.chosen), m)


# ----------------------------------------------------------------------------- random episodes


@st.composite
def episodes(draw):
    seed = draw(st.integers(0, 2**31 - 1))
    m = draw(st.integers(1, 7))
    n = draw(st.integers(0, 25))
    rng = np.random.default_rng(seed)
    arrival = np.sort(rng.integers(0, 150, n))
    deadline = arrival + rng.integers(5, 80, n)
    need = rng.integers(1, 70, n)
    need[rng.random(n) < 0.15] = NEVER
    return arrival, deadline, need, m


@settings(max_examples=25, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(episodes())
def test_between_policies_and_oracle(ep):
    arrival, deadline, need, m = ep
    r = solve_and_verify(arrival, deadline, need, m)
    assert r.optimal
    assert r.successes <= int(independent_feasible(arrival, deadline, need).sum())
    assert r.successes >= greedy_sim(arrival, deadline, need, m, "edf")
    assert r.successes >= greedy_sim(arrival, deadline, need, m, "fifo")


def test_batch_matches_episodes():
    rng = np.random.default_rng(3)
    E, N = 3, 12
    n_tasks = np.array([12, 5, 0])
    arrival = np.sort(rng.integers(0, 60, (E, N)), axis=1)
    deadline = arrival + rng.integers(10, 40, (E, N))
    need = rng.integers(1, 35, (E, N))
    out = clairvoyant_batch(arrival, deadline, need, n_tasks, n_nodes=2)
    assert len(out) == E
    for e in range(E):
        m = n_tasks[e]
        ref = clairvoyant_episode(arrival[e, :m], deadline[e, :m], need[e, :m], n_nodes=2)
        assert out[e].successes == ref.successes and out[e].chosen.shape == (m,)


def test_short_time_limit_gives_valid_bounds():
    # Whatever the time limit, `chosen` is feasible and upper_bound really bounds the optimum
    # (a limit hit in presolve must not report the solver's placeholder bound of 0).
    rng = np.random.default_rng(0)
    arrival = np.flatnonzero(rng.random(500) < 0.1)
    deadline = arrival + rng.integers(285, 351, len(arrival))
    need = rng.integers(200, 340, len(arrival))
    exact = solve_and_verify(arrival, deadline, need, 7)
    assert exact.optimal
    for tl in (0.0, 0.02):
        r = solve_and_verify(arrival, deadline, need, 7, time_limit_s=tl)
        assert r.successes <= exact.successes <= r.upper_bound
        assert r.upper_bound <= int(independent_feasible(arrival, deadline, need).sum())
        assert r.optimal == (r.successes == r.upper_bound)


# ----------------------------------------------------------------------------- missing OR-Tools


def test_missing_ortools_message(monkeypatch):
    for name in ("ortools", "ortools.sat", "ortools.sat.python", "ortools.sat.python.cp_model"):
        monkeypatch.setitem(sys.modules, name, None)
    with pytest.raises(RuntimeError) as err:
        clairvoyant_episode([0], [5], [2])
    assert str(err.value) == "Clairvoyant needs OR-Tools: pip install 'mara[bounds]'"
    with pytest.raises(RuntimeError):
        clairvoyant_batch(np.zeros((1, 1)), np.ones((1, 1)), np.ones((1, 1)), [1])
    # The schedule builder and the Oracle need no OR-Tools.
    assert feasible_schedule([0], [5], [2], [True], n_nodes=1)[:, 0].tolist().count(0) == 2
