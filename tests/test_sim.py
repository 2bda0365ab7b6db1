"""Batched simulator: hand-worked episodes and property tests over random episodes."""

import numpy as np
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from mara.allocators.rules import EDF, FIFO
from mara.curves.bank import NEVER
from mara.sim.env import IDLE, BatchedEnv, run_episodes
from mara.sim.workload import (
    PAPER_TASK_SETS,
    EpisodeBatch,
    episodes_from_tasks,
    generate_episodes,
    generate_stress_episodes,
)


def eps_for_need(n):
    """On the linear bank L(s) = 2 - 0.01 (s + 1): the target first reached at batch n."""
    return 2.0 - 0.01 * (n + 1) + 0.004


def task(arrival, need, budget, row=0):
    return {"arrival": arrival, "budget": budget, "eps": eps_for_need(need), "curve_row": row, "family": "CNN_Cifar10"}


def test_need_from_eps(linear_bank):
    ep = episodes_from_tasks([[task(0, 5, 10), task(0, 3, 4)]], linear_bank)
    assert ep.need.tolist() == [[5, 3]]


def test_fifo_vs_edf_by_hand(linear_bank):
    # one node: A (need 5, deadline 10) and B (need 3, deadline 4), both at t = 0
    ep = episodes_from_tasks([[task(0, 5, 10), task(0, 3, 4)]], linear_bank)
    fifo = run_episodes(BatchedEnv(ep, linear_bank, n_nodes=1), FIFO())
    edf = run_episodes(BatchedEnv(ep, linear_bank, n_nodes=1), EDF())
    assert fifo["succeeded"][0] == 1  # A done at 5; B expired at 4 unserved
    assert edf["succeeded"][0] == 2  # B on steps 0-2, A on steps 3-7, done at 8 <= 10


@pytest.mark.parametrize("need, budget, ok", [(6, 6, True), (7, 6, False), (1, 1, True)])
def test_deadline_boundary(linear_bank, need, budget, ok):
    ep = episodes_from_tasks([[task(3, need, budget)]], linear_bank)
    m = run_episodes(BatchedEnv(ep, linear_bank, n_nodes=1), FIFO())
    assert m["succeeded"][0] == int(ok) and m["failed"][0] == int(not ok)


def test_admission_limit_and_queue(linear_bank):
    # K = 1: the second task waits in the queue until the first leaves at t = 3, then has one step left
    ep = episodes_from_tasks([[task(0, 3, 10), task(0, 2, 4)]], linear_bank, n_steps=1)
    env = BatchedEnv(ep, linear_bank, n_nodes=2, max_active=1)
    m = run_episodes(env, FIFO())
    assert m["succeeded"][0] == 1 and m["failed"][0] == 1
    assert env.status[0].tolist() == [3, 4]
    assert m["steps"][0] == 4  # steps 0..3, then nothing left
    assert m["queue_full"][0] == 1.0  # the single slot was occupied at every step
    assert m["waiting"][0] == pytest.approx(3 / 4)  # queue length 1 during steps 0..2
    assert m["utilization"][0] == pytest.approx(4 / (2 * 4))


def test_queued_task_expires(linear_bank):
    ep = episodes_from_tasks([[task(0, 20, 30), task(1, 2, 5)]], linear_bank)
    m = run_episodes(BatchedEnv(ep, linear_bank, n_nodes=1, max_active=1), FIFO())
    assert m["succeeded"][0] == 1 and m["failed"][0] == 1 and m["n_tasks"][0] == 2


def test_ready_time(linear_bank):
    ep = episodes_from_tasks([[task(2, 200, 300)]], linear_bank)
    m = run_episodes(BatchedEnv(ep, linear_bank, n_nodes=1, obs_every=10), FIFO())
    assert m["ready"][0] == 40  # 4th observation after 40 served batches


def test_invalid_actions_raise(linear_bank):
    ep = episodes_from_tasks([[task(0, 5, 10), task(0, 3, 10)]], linear_bank)
    env = BatchedEnv(ep, linear_bank, n_nodes=2)
    env.reset()
    with pytest.raises(ValueError, match="two nodes"):
        env.step(np.array([[0, 0]]))
    with pytest.raises(ValueError, match="empty slot"):
        env.step(np.array([[5, IDLE]]))
    with pytest.raises(ValueError, match="shape"):
        env.step(np.array([0, 1]))


def test_bad_settings(linear_bank):
    ep = episodes_from_tasks([[task(0, 5, 10)]], linear_bank)
    with pytest.raises(ValueError, match="nodes must be >= 1"):
        BatchedEnv(ep, linear_bank, n_nodes=0)


class RecordingRandom:
    """Random valid allocator that records which task every node served (to check the env independently)."""

    name = "random"

    def __init__(self, seed, n_nodes):
        self.rng, self.M = np.random.default_rng(seed), n_nodes
        self.log = []  # (t, episode, task)

    def reset(self, n_episodes):
        pass

    def act(self, obs):
        E, K = obs.present.shape
        actions = np.full((E, self.M), IDLE)
        for e in range(E):
            slots = np.flatnonzero(obs.present[e])
            k = self.rng.integers(0, min(len(slots), self.M) + 1)
            pick = self.rng.permutation(slots)[:k]
            actions[e, : len(pick)] = pick
            for s in pick:
                self.log.append((obs.t, e, int(obs.task[e, s])))
        return actions


@settings(max_examples=12, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(
    seed=st.integers(0, 10_000), load=st.sampled_from([0.04, 0.07, 0.2]), nodes=st.integers(1, 7), k=st.integers(1, 10)
)
def test_invariants_random_episodes(small_bank, seed, load, nodes, k):
    ep = generate_episodes(small_bank, small_bank.family_params, PAPER_TASK_SETS["RL_OOD"], load, seed, 3, n_steps=120)
    alloc = RecordingRandom(seed, nodes)
    env = BatchedEnv(ep, small_bank, n_nodes=nodes, max_active=k)
    m = run_episodes(env, alloc)
    served = {}
    per_step = {}
    for t, e, j in alloc.log:
        served.setdefault((e, j), []).append(t)
        per_step[(t, e)] = per_step.get((t, e), 0) + 1
        assert ep.arrival[e, j] <= t < ep.deadline[e, j]  # only inside the task's window
    assert max(per_step.values(), default=0) <= nodes  # at most M served
    for e in range(ep.E):
        n = ep.n_tasks[e]
        assert m["succeeded"][e] + m["failed"][e] == n  # arrived = succeeded + failed
        for j in range(n):
            times = served.get((e, j), [])
            assert len(set(times)) == len(times)  # never on two nodes in one step
            if env.status[e, j] == 3:
                assert len(times) == ep.need[e, j]  # succeeded exactly at the first crossing
                assert small_bank.L[ep.curve_row[e, j], ep.need[e, j] - 1] <= ep.eps[e, j]
                assert env.finish_time[e, j] == times[-1] + 1 <= ep.deadline[e, j]
            else:
                assert env.status[e, j] == 4 and len(times) < ep.need[e, j]


def test_same_root_same_episodes(small_bank):
    fp = small_bank.family_params
    a = generate_episodes(small_bank, fp, PAPER_TASK_SETS["ViT_OOD"], 0.05, 7, 4)
    b = generate_episodes(small_bank, fp, PAPER_TASK_SETS["ViT_OOD"], 0.05, 7, 4)
    c = generate_episodes(small_bank, fp, PAPER_TASK_SETS["ViT_OOD"], 0.05, 8, 4)
    for name in ("arrival", "deadline", "eps", "need", "curve_row"):
        np.testing.assert_array_equal(getattr(a, name), getattr(b, name))
    assert not np.array_equal(a.arrival, c.arrival)
    # methods see identical episodes: metrics of a method are a function of the episodes only
    m1 = run_episodes(BatchedEnv(a, small_bank), EDF())
    m2 = run_episodes(BatchedEnv(b, small_bank), EDF())
    np.testing.assert_array_equal(m1["succeeded"], m2["succeeded"])


def test_ood_share_and_load(small_bank):
    ep = generate_episodes(small_bank, small_bank.family_params, PAPER_TASK_SETS["RL_OOD"], 0.04, 0, 60)
    fams = ep.family[ep.valid]
    assert 0.12 < np.mean(fams == "RLExpertConfig") < 0.28
    assert 17 < ep.n_tasks.mean() < 23  # ≈ 500 × 0.04


def test_bad_load(small_bank):
    with pytest.raises(ValueError, match=r"load p must lie in \[0, 1\]"):
        generate_episodes(small_bank, small_bank.family_params, PAPER_TASK_SETS["ID"], 1.5, 0, 1)


def test_stress_scenario_rules(small_bank):
    ep = generate_stress_episodes(small_bank, root=0, n_episodes=4)
    assert (ep.n_tasks == 20).all()
    assert (ep.oracle_successes() == 13).all()
    early = ep.need[:, :7]
    assert (early == NEVER).all() or (early > ep.budget[:, :7]).all()
    assert ((ep.need[:, 7:] >= 22) & (ep.need[:, 7:] <= 35)).all()
    for alloc in (FIFO(), EDF()):
        assert run_episodes(BatchedEnv(ep, small_bank), alloc)["succeeded"].sum() == 0


def test_concat_pads(small_bank):
    fp = small_bank.family_params
    a = generate_episodes(small_bank, fp, PAPER_TASK_SETS["ID"], 0.02, 0, 2)
    b = generate_episodes(small_bank, fp, PAPER_TASK_SETS["ID"], 0.08, 0, 2)
    c = EpisodeBatch.concat([a, b])
    assert c.E == 4 and c.N == max(a.N, b.N)
    assert c.valid.sum() == a.n_tasks.sum() + b.n_tasks.sum()


def test_bounded_queue_turns_away_and_does_not_count(linear_bank):
    # K = 1, Q = 1: of four tasks at t = 0 one is admitted, one waits, the two latest are turned away;
    # a fifth task at t = 1 (task 0 still active, task 1 waiting) finds the queue full and is turned away too
    tasks = [task(0, 2, 10), task(0, 2, 10), task(0, 2, 10), task(0, 2, 10), task(1, 1, 10)]
    ep = episodes_from_tasks([tasks], linear_bank)
    env = BatchedEnv(ep, linear_bank, n_nodes=1, max_active=1, queue_capacity=1)
    m = run_episodes(env, FIFO())
    assert env.status[0].tolist() == [3, 3, 5, 5, 5]
    assert m["turned_away"][0] == 3 and m["n_tasks"][0] == 2 and m["succeeded"][0] == 2
    assert m["success_rate"][0] == 1.0 and m["oracle"][0] == 2
    unbounded = run_episodes(BatchedEnv(ep, linear_bank, n_nodes=1, max_active=1), FIFO())
    assert unbounded["n_tasks"][0] == 5 and unbounded["turned_away"][0] == 0


def test_queue_capacity_none_changes_nothing(linear_bank):
    ep = episodes_from_tasks([[task(0, 3, 10), task(0, 2, 4), task(1, 2, 9)]], linear_bank)
    a = run_episodes(BatchedEnv(ep, linear_bank, n_nodes=1, max_active=1), FIFO())
    b = run_episodes(BatchedEnv(ep, linear_bank, n_nodes=1, max_active=1, queue_capacity=100), FIFO())
    for k in ("n_tasks", "succeeded", "failed", "waiting", "queue_full"):
        assert np.array_equal(a[k], b[k])
