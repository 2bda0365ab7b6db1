"""LARA on discrete nodes (LARA.md): feasibility test, tree search, dispatch, and the allocator in the simulator."""

from __future__ import annotations

import importlib
import itertools
from collections import deque
from pathlib import Path

import numpy as np
import pytest
import yaml

from mara.allocators.lara import (
    LARA,
    feasible,
    largest_feasible_set,
    least_laxity_order,
)
from mara.allocators.rules import EDF, FIFO
from mara.sim.env import IDLE, BatchedEnv, run_episodes

ROOT = Path(__file__).resolve().parents[1]


# ------------------------------------------------------------------------------ reference algorithms
def maxflow_feasible(p, tau, m) -> bool:
    """Edmonds–Karp on source → task (cap p_k) → step t < τ_k (cap 1) → sink (cap m per step)."""
    p, tau = [int(x) for x in p], [int(x) for x in tau]
    n, H = len(p), max(tau, default=0)
    src, snk = 0, n + H + 1
    V = n + H + 2
    cap = [[0] * V for _ in range(V)]
    for k in range(n):
        cap[src][1 + k] = p[k]
        for t in range(tau[k]):
            cap[1 + k][1 + n + t] = 1
    for t in range(H):
        cap[1 + n + t][snk] = m
    flow = 0
    while True:
        parent = [-1] * V
        parent[src] = src
        q = deque([src])
        while q and parent[snk] < 0:
            u = q.popleft()
            for v in range(V):
                if parent[v] < 0 and cap[u][v] > 0:
                    parent[v] = u
                    q.append(v)
        if parent[snk] < 0:
            break
        b, v = float("inf"), snk
        while v != src:
            b = min(b, cap[parent[v]][v])
            v = parent[v]
        v = snk
        while v != src:
            cap[parent[v]][v] -= b
            cap[v][parent[v]] += b
            v = parent[v]
        flow += b
    return flow == sum(p)


def moore_hodgson(p, due) -> int:
    """Max number of on-time jobs on one machine (common release 0): EDD, drop the longest job on overflow."""
    import heapq

    heap, total = [], 0
    for k in sorted(range(len(p)), key=lambda k: (due[k], k)):
        heapq.heappush(heap, -int(p[k]))
        total += int(p[k])
        if total > due[k]:
            total += heapq.heappop(heap)  # removes the longest (stored negated)
    return len(heap)


def brute_force_best(p, tau, m):
    """Lexicographically first (include-first in deadline order) feasible subset of maximum size."""
    n = len(p)
    order = np.lexsort((np.arange(n), tau))
    best, best_size = None, -1
    # include-first lexicographic order == bit patterns descending with the earliest deadline most significant
    for bits in itertools.product((1, 0), repeat=n):
        sel = np.zeros(n, dtype=bool)
        sel[order[np.array(bits, dtype=bool)]] = True
        if sel.sum() > best_size and feasible(p[sel], tau[sel], m):
            best, best_size = sel, int(sel.sum())
    return best


# ------------------------------------------------------------------------------ pure math
def test_feasible_agrees_with_max_flow():
    rng = np.random.default_rng(0)
    n_feas = 0
    for _ in range(400):
        n = int(rng.integers(1, 6))
        m = int(rng.integers(1, 4))
        tau = rng.integers(1, 9, n)
        p = rng.integers(0, 9, n)
        f = feasible(p, tau, m)
        assert f == maxflow_feasible(p, tau, m), (p, tau, m)
        n_feas += f
    assert 50 < n_feas < 350  # both outcomes well represented


def test_feasible_edge_cases():
    assert feasible([], [], 3)
    assert feasible([3], [3], 1) and not feasible([4], [3], 5)  # one node per task per step
    assert feasible([2, 2], [2, 2], 2) and not feasible([2, 2], [2, 2], 1)
    assert not feasible([1], [5], 0) and feasible([0], [5], 0)


def test_tree_search_equals_brute_force():
    rng = np.random.default_rng(1)
    for it in range(120):
        n = int(rng.integers(1, 11)) if it % 4 else 10
        m = int(rng.integers(1, 4))
        tau = rng.integers(1, 25, n)
        p = rng.integers(1, 20, n)
        got = largest_feasible_set(p, tau, m)
        assert feasible(p[got], tau[got], m)
        exp = brute_force_best(p, tau, m)
        assert got.sum() == exp.sum(), (p, tau, m)
        assert np.array_equal(got, exp), (p, tau, m)


def test_single_node_agrees_with_moore_hodgson():
    rng = np.random.default_rng(2)
    for _ in range(300):
        n = int(rng.integers(1, 11))
        tau = rng.integers(1, 40, n)
        p = rng.integers(1, 15, n)
        assert largest_feasible_set(p, tau, 1).sum() == moore_hodgson(p, tau), (p, tau)


def test_least_laxity_dispatch_completes_every_feasible_set():
    """The dispatch rule LARA uses: if S is feasible and estimates are exact, serving it least-laxity-first
    (ties: earlier deadline) every step finishes every task of S."""
    rng = np.random.default_rng(3)
    checked = 0
    for _ in range(3000):
        n, m = int(rng.integers(1, 8)), int(rng.integers(1, 4))
        tau, p = rng.integers(1, 12, n), rng.integers(1, 12, n)
        if not feasible(p, tau, m):
            continue
        checked += 1
        p, tau = p.copy(), tau.copy()
        for _t in range(int(tau.max())):
            assert not np.any((p > 0) & (tau <= 0))
            run = [k for k in least_laxity_order(p, tau) if p[k] > 0][:m]
            p[run] -= 1
            tau -= 1
        assert np.all(p == 0)
    assert checked > 300


# ------------------------------------------------------------------------------ allocator
class PerfectPredictor:
    """TEST FIXTURE ONLY: knows every bank curve. It identifies a task's curve by its observed prefix and
    returns the exact remaining batches to the first ε crossing (the cap when the curve never crosses)."""

    name = "perfect"

    def __init__(self, bank, obs_every: int = 10):
        self.bank, self.obs_every = bank, obs_every
        self.Lobs = bank.L[:, obs_every - 1 :: obs_every]  # what the simulator reports, per bank row

    def predict_remaining(self, S, L, lengths, eps, cap_remaining, batch_size, lr, family=None):
        out = np.asarray(cap_remaining, dtype=np.float64).copy()
        for b in range(len(lengths)):
            n = int(lengths[b])
            if n < 4:
                continue
            cand = np.flatnonzero(
                (self.bank.batch_size == batch_size[b]) & np.all(self.Lobs[:, :n] == L[b, :n], axis=1)
            )
            if len(cand) == 0:
                continue
            row = cand[0]
            need = int(self.bank.first_crossing(np.array([row]), np.array([eps[b]]))[0])
            done = int(round(S[b, n - 1] / batch_size[b]))
            if need < self.bank.lengths[row]:
                out[b] = min(max(need - done, 0), out[b])
        return out


class CheckedAllocator:
    """Wraps an allocator and asserts Eq. 2 and 'never an empty slot' on every action."""

    def __init__(self, inner):
        self.inner, self.name, self.n_steps = inner, inner.name, 0

    def reset(self, n):
        self.inner.reset(n)

    def act(self, obs):
        a = self.inner.act(obs)
        assert a.shape == (obs.present.shape[0], obs.n_nodes)
        for e in range(a.shape[0]):
            s = a[e][a[e] != IDLE]
            assert len(np.unique(s)) == len(s), "a task was assigned twice"
            assert np.all(obs.present[e, s]), "a node was assigned to an empty slot"
        self.n_steps += 1
        return a


@pytest.fixture(scope="module")
def bank():
    from mara.curves.bank import default_bank_path, load_bank

    return load_bank(default_bank_path())


def _episodes(bank, task_set="ID", load=0.04, root=0, n=6):
    from mara.sim.workload import PAPER_TASK_SETS, generate_episodes

    return generate_episodes(bank, bank.family_params, PAPER_TASK_SETS[task_set], load, root, n)


@pytest.mark.parametrize(
    "kwargs",
    [
        {},
        {"leftover": "idle"},
        {"leftover": ["cold_edf", "warm_edf"], "plan_nodes": "all", "dispatch": "edf", "cold_order": "fifo"},
        {"cold_reserve": 0},
    ],
)
def test_lara_actions_valid_in_simulator(bank, kwargs):
    eps = _episodes(bank, "RL_OOD", load=0.07, root=3, n=6)
    alloc = CheckedAllocator(LARA(**kwargs))
    m = run_episodes(BatchedEnv(eps, bank, predictor=PerfectPredictor(bank)), alloc)
    assert alloc.n_steps > 100
    assert np.all(m["succeeded"] + m["failed"] == m["n_tasks"])


def test_plan_fast_path_matches_tree_search():
    rng = np.random.default_rng(4)
    E, K = 200, 10
    p = rng.integers(1, 60, (E, K))
    tau = rng.integers(1, 80, (E, K))
    warm = rng.random((E, K)) < 0.7
    m = rng.integers(0, 8, E)
    alloc = LARA()
    S = alloc.plan(p, tau, warm, m)
    for e in range(E):
        ks = np.flatnonzero(warm[e])
        exp = np.zeros(K, dtype=bool)
        exp[ks[largest_feasible_set(p[e, ks], tau[e, ks], int(m[e]))]] = True
        assert np.array_equal(S[e], exp), e
    assert 0 < alloc.n_searches < E


def test_reserve_and_leftover_rules():
    """Hand-built observation: one cold node to the earliest-deadline cold task, S by least laxity, leftovers."""
    from types import SimpleNamespace

    K, M = 6, 3
    present = np.array([[1, 1, 1, 1, 1, 0]], dtype=bool)
    n_obs = np.array([[0, 2, 5, 5, 5, 0]])
    tau = np.array([[50, 40, 30, 30, 30, 0]])
    pred = np.array([[999, 999, 10, 25, 100, 0]], dtype=float)  # slot 4: individually infeasible
    dl = tau + 7
    z = np.zeros((1, K), dtype=np.int64)
    obs = SimpleNamespace(
        t=7,
        present=present,
        task=np.where(present, np.arange(K), -1),
        arrival=z,
        deadline=dl,
        remaining_time=tau,
        processed=z,
        n_obs=n_obs,
        cap_remaining=np.full((1, K), 999) * present,
        pred_remaining=pred,
        n_nodes=M,
        max_active=K,
    )  # the Observation fields LARA reads
    a = LARA().act(obs)[0]
    assert a[0] == 1  # reserved: cold task with the earliest deadline
    assert list(a[1:]) == [3, 2]  # S = {2, 3} on M-1 = 2 nodes, least laxity (5 < 20) first
    b = LARA(cold_reserve=0).act(obs)[0]
    assert list(b) == [3, 2, 4]  # no reservation: S then leftover warm (slot 4) by least laxity
    c = LARA(cold_reserve=0, leftover=["cold_edf"]).act(obs)[0]
    assert list(c) == [3, 2, 1]
    d = LARA(cold_reserve=0, leftover="idle").act(obs)[0]
    assert list(d) == [3, 2, IDLE]


def test_stress_lara_beats_fifo_and_edf(bank):
    from mara.sim.workload import generate_stress_episodes

    ep = generate_stress_episodes(bank, root=0, n_episodes=6)
    res = {}
    for alloc, pred in ((FIFO(), None), (EDF(), None), (LARA(), PerfectPredictor(bank))):
        res[alloc.name] = run_episodes(BatchedEnv(ep, bank, predictor=pred), alloc)["succeeded"].sum()
    assert res["LARA"] > res["FIFO"] and res["LARA"] > res["EDF"], res


def _instantiate(cfg):
    try:  # the runner builds allocators with Hydra (list options arrive as ListConfig)
        from hydra.utils import instantiate
        from omegaconf import OmegaConf

        return instantiate(OmegaConf.create(cfg).allocator)
    except ImportError:
        pass
    mod, cls = cfg["allocator"]["_target_"].rsplit(".", 1)
    kw = {k: v for k, v in cfg["allocator"].items() if k != "_target_"}
    return getattr(importlib.import_module(mod), cls)(**kw)


@pytest.mark.parametrize("name,predictor", [("LARA", "wls"), ("LARA-FM", "fm")])
def test_method_configs(name, predictor):
    cfg = yaml.safe_load((ROOT / "conf" / "method" / f"{name}.yaml").read_text())
    assert cfg["name"] == name and cfg["kind"] == "policy" and cfg["predictor"] == predictor
    alloc = _instantiate(cfg)
    assert isinstance(alloc, LARA) and alloc.name == name


def test_lara_with_wls_end_to_end(bank):
    wls = pytest.importorskip("mara.predictors.baselines.wls")
    eps = _episodes(bank, "ID", root=1, n=6)
    alloc = CheckedAllocator(LARA())
    m = run_episodes(BatchedEnv(eps, bank, predictor=wls.WLSPredictor()), alloc)
    assert m["succeeded"].sum() > 0
    assert np.all(m["succeeded"] + m["failed"] == m["n_tasks"])
