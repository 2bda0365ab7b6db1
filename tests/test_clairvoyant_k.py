"""Clairvoyant-K: exact best success count with every need known AND the admission limit K."""

from __future__ import annotations

import itertools
from functools import lru_cache

import numpy as np
import pytest

pytest.importorskip("ortools")

from mara.allocators.rules import EDF, FIFO  # noqa: E402
from mara.bounds.clairvoyant import (  # noqa: E402
    ClairvoyantResult,
    clairvoyant_episode,
    independent_feasible,
)
from mara.bounds.clairvoyant_k import (  # noqa: E402
    NEVER,
    clairvoyant_k_batch,
    clairvoyant_k_episode,
    simulate_k,
)
from mara.sim.env import IDLE, BatchedEnv, run_episodes  # noqa: E402
from mara.sim.workload import (  # noqa: E402
    PAPER_TASK_SETS,
    episodes_from_tasks,
    generate_episodes,
    generate_stress_episodes,
)


def eps_for_need(n):
    """On the linear bank L(s) = 2 - 0.01 (s + 1): the target first reached at batch n."""
    return 2.0 - 0.01 * (n + 1) + 0.004


def task(arrival, need, budget, row=0):
    eps = -1.0 if need == NEVER else eps_for_need(need)  # -1: never reached
    return {"arrival": arrival, "budget": budget, "eps": eps, "curve_row": row, "family": "CNN_Cifar10"}


# ----------------------------------------------------------------------------- a tiny simulator


class Tiny:
    """The simulator's rules for one episode, written plainly (independent of env.py and simulate_k).

    State between steps: t, served counts, status per task (0 pending, 1 queued, 2 active, 3 won,
    4 lost).  ``admit()`` runs the arrivals + FIFO admission of step t, ``step(pick)`` the rest.
    """

    def __init__(self, b, d, q, m, k):
        self.b, self.d, self.q, self.m, self.k = list(b), list(d), [max(1, int(x)) for x in q], m, k

    def admit(self, t, status):
        status = list(status)
        for j, bj in enumerate(self.b):
            if bj == t and status[j] == 0:
                status[j] = 1
        n_act = status.count(2)
        for j in range(len(status)):  # queue order = index order
            if status[j] == 1 and n_act < self.k:
                status[j] = 2
                n_act += 1
        return tuple(status)

    def step(self, t, served, status, pick):
        served, status = list(served), list(status)
        assert len(pick) <= self.m and all(status[j] == 2 for j in pick)
        won = 0
        for j in pick:
            served[j] += 1
            if served[j] >= self.q[j]:
                status[j] = 3
                won += 1
        for j in range(len(status)):
            if status[j] in (1, 2) and self.d[j] <= t + 1:
                status[j] = 4
        return tuple(served), tuple(status), won


def brute_force_k(b, d, q, m, k):
    """Best success count over EVERY policy: DFS over all sets of <= m active tasks at every step."""
    sim = Tiny(b, d, q, m, k)
    horizon = max(d)

    @lru_cache(maxsize=None)
    def best(t, served, status):
        if t >= horizon:
            return 0
        status = sim.admit(t, status)
        active = [j for j, s in enumerate(status) if s == 2]
        out = 0
        for r in range(min(m, len(active)) + 1):
            for pick in itertools.combinations(active, r):
                s2, st2, won = sim.step(t, served, status, pick)
                out = max(out, won + best(t + 1, s2, st2))
        return out

    n = len(b)
    return best(0, (0,) * n, (0,) * n)


def random_instance(rng, n_max=5, horizon=10):
    n = int(rng.integers(1, n_max + 1))
    b = np.sort(rng.integers(0, horizon - 1, n))
    budget = rng.integers(1, horizon + 1, n)
    d = np.minimum(b + budget, horizon)
    q = rng.integers(1, 6, n)
    q[rng.random(n) < 0.2] = NEVER
    return b, d, q


# ----------------------------------------------------------------------------- simulators agree


class Replay:
    """Random valid allocator for BatchedEnv that records the task ids it served at each step."""

    name = "replay"

    def __init__(self, seed, m):
        self.rng, self.m, self.log = np.random.default_rng(seed), m, {}

    def reset(self, n_episodes):
        pass

    def act(self, obs):
        actions = np.full((1, self.m), IDLE)
        slots = np.flatnonzero(obs.present[0])
        r = self.rng.integers(0, min(len(slots), self.m) + 1)
        pick = self.rng.permutation(slots)[:r]
        actions[0, : len(pick)] = pick
        self.log[obs.t] = sorted(int(obs.task[0, s]) for s in pick)
        return actions


@pytest.mark.parametrize("seed", range(25))
def test_simulators_agree_with_env(linear_bank, seed):
    rng = np.random.default_rng(seed)
    m, k = int(rng.integers(1, 3)), int(rng.integers(1, 3))
    b, d, q = random_instance(rng, n_max=6, horizon=12)
    b, d = b.astype(int), np.maximum(d, b + 1).astype(int)
    ep = episodes_from_tasks(
        [[task(int(b[j]), int(q[j]), int(d[j] - b[j])) for j in range(len(b))]], linear_bank, n_steps=1
    )
    assert (ep.need[0, : len(b)] == q).all()
    alloc = Replay(seed, m)
    env = BatchedEnv(ep, linear_bank, n_nodes=m, max_active=k)
    run_episodes(env, alloc)
    env_won = env.status[0, : len(b)] == 3
    # the module's simulator, replaying the same picks
    ok, steps, _ = simulate_k(b, d, q, m, k, lambda t, active, served: [j for j in alloc.log.get(t, []) if j in active])
    for t, pick in alloc.log.items():
        for j in pick:
            assert t in steps[j]  # every recorded pick was legal for simulate_k too
    np.testing.assert_array_equal(ok, env_won)
    # the test's tiny simulator, same picks
    sim = Tiny(b, d, q, m, k)
    served, status = (0,) * len(b), (0,) * len(b)
    for t in range(int(d.max())):
        status = sim.admit(t, status)
        served, status, _ = sim.step(t, served, status, tuple(alloc.log.get(t, [])))
    np.testing.assert_array_equal(np.array(status) == 3, env_won)


# ----------------------------------------------------------------------------- exactness


def test_hand_case_admission_binds():
    # K = 1, M = 1.  Task 0 never succeeds and holds the only slot until 6; task 1 (need 2, [1, 7))
    # is admitted at 6 and cannot finish: 0 successes, although the K-relaxed optimum is 1.
    b, d, q = [0, 1], [6, 7], [NEVER, 2]
    r = clairvoyant_k_episode(b, d, q, n_nodes=1, max_active=1)
    assert r.optimal and r.successes == r.upper_bound == 0
    assert clairvoyant_episode(b, d, q, n_nodes=1).successes == 1
    # finishing task 0 is impossible, but with K = 2 both fit
    assert clairvoyant_k_episode(b, d, q, n_nodes=1, max_active=2).successes == 1


def test_hand_case_finish_fast_to_admit():
    # K = 1, M = 1: task 0 (need 2, [0, 10)) must finish by step 1 so task 1 (need 3, [1, 5)) is
    # admitted at 2 and done at 4; both succeed only if task 0 is served at once.
    r = clairvoyant_k_episode([0, 1], [10, 5], [2, 3], n_nodes=1, max_active=1)
    assert r.optimal and r.successes == 2


@pytest.mark.parametrize("seed", range(120))
def test_exact_against_brute_force(seed):
    rng = np.random.default_rng(1000 + seed)
    b, d, q = random_instance(rng)
    m, k = int(rng.integers(1, 3)), int(rng.integers(1, 3))
    want = brute_force_k(b, d, q, m, k)
    for heur in (True, False):  # False: the CP-SAT model alone, without incumbent or hint
        r = clairvoyant_k_episode(b, d, q, n_nodes=m, max_active=k, time_limit_s=20.0, _use_heuristics=heur)
        assert isinstance(r, ClairvoyantResult)
        assert r.optimal
        assert r.successes == r.upper_bound == want == int(r.chosen.sum())
    assert r.successes <= clairvoyant_episode(b, d, q, n_nodes=m).successes


def test_brute_force_k_large_equals_relaxed():
    # sanity of the brute force itself: with K >= n it is the K-relaxed optimum
    rng = np.random.default_rng(7)
    for _ in range(15):
        b, d, q = random_instance(rng)
        m = int(rng.integers(1, 3))
        assert brute_force_k(b, d, q, m, len(b)) == clairvoyant_episode(b, d, q, n_nodes=m).successes


# ----------------------------------------------------------------------------- random episodes


class RandomValid:
    name = "random"

    def __init__(self, seed):
        self.rng = np.random.default_rng(seed)

    def reset(self, n_episodes):
        pass

    def act(self, obs):
        E, _ = obs.present.shape
        actions = np.full((E, obs.n_nodes), IDLE)
        for e in range(E):
            slots = np.flatnonzero(obs.present[e])
            pick = self.rng.permutation(slots)[: min(len(slots), obs.n_nodes)]
            pick = pick[: self.rng.integers(0, len(pick) + 1)]
            actions[e, : len(pick)] = pick
        return actions


@pytest.mark.parametrize("nodes, k, load, seed", [(2, 3, 0.2, 0), (3, 4, 0.15, 1), (2, 2, 0.1, 2), (4, 5, 0.25, 3)])
def test_bound_order_on_random_episodes(small_bank, nodes, k, load, seed):
    ep = generate_episodes(small_bank, small_bank.family_params, PAPER_TASK_SETS["RL_OOD"], load, seed, 3, n_steps=40)
    res = clairvoyant_k_batch(
        ep.arrival, ep.deadline, ep.need, ep.n_tasks, n_nodes=nodes, max_active=k, time_limit_s=5.0
    )
    policies = [FIFO(), EDF(), RandomValid(seed), RandomValid(seed + 100)]
    got = [run_episodes(BatchedEnv(ep, small_bank, n_nodes=nodes, max_active=k), p)["succeeded"] for p in policies]
    for e, r in enumerate(res):
        n = ep.n_tasks[e]
        rel = clairvoyant_episode(ep.arrival[e, :n], ep.deadline[e, :n], ep.need[e, :n], n_nodes=nodes)
        oracle = int(independent_feasible(ep.arrival[e, :n], ep.deadline[e, :n], ep.need[e, :n]).sum())
        assert r.successes <= r.upper_bound <= rel.upper_bound <= oracle
        for g in got:
            assert g[e] <= r.upper_bound
        if r.optimal:
            assert max(g[e] for g in got) <= r.successes


def test_stress_scenario(small_bank):
    ep = generate_stress_episodes(small_bank, root=0, n_episodes=2)
    res = clairvoyant_k_batch(ep.arrival, ep.deadline, ep.need, ep.n_tasks, n_nodes=7, max_active=10, time_limit_s=20.0)
    for r in res:
        assert r.optimal and r.successes == r.upper_bound == 13


def test_batch_shapes_and_errors():
    res = clairvoyant_k_batch(
        np.array([[0, 1, 0]]), np.array([[5, 6, 0]]), np.array([[2, 3, 0]]), [2], n_nodes=1, max_active=1
    )
    assert len(res) == 1 and res[0].chosen.shape == (2,)
    with pytest.raises(ValueError, match="arrival order"):
        clairvoyant_k_episode([3, 1], [5, 6], [1, 1])
    with pytest.raises(ValueError, match="one entry per episode"):
        clairvoyant_k_batch(np.zeros((2, 2)), np.ones((2, 2)), np.ones((2, 2)), [2])
    r = clairvoyant_k_episode([], [], [])
    assert r.successes == r.upper_bound == 0 and r.optimal


@pytest.mark.parametrize("seed", range(40))
def test_admission_window_is_valid(seed):
    # early/late admission bounds hold for random policies in the simulator
    from mara.bounds.simulate_k import admission_window, fifo_episode

    rng = np.random.default_rng(77 + seed)
    b, d, q = random_instance(rng, n_max=8, horizon=14)
    b, d, q = fifo_episode(b, d, q)
    m, k = int(rng.integers(1, 3)), int(rng.integers(1, 4))
    early, late = admission_window(b, d, q, k, q <= d - b)
    pol = np.random.default_rng(seed)
    for _ in range(5):
        ok, _, adm = simulate_k(
            b, d, q, m, k, lambda t, active, served: list(pol.permutation(active)[: pol.integers(0, m + 1)])
        )
        for j in range(len(b)):
            if early[j] < 0:
                assert adm[j] < 0 and not ok[j]
            if adm[j] >= 0:
                assert early[j] <= adm[j]
                assert late[j] < 0 or adm[j] <= late[j]
            if ok[j]:
                assert early[j] + q[j] <= d[j]
