"""The predictor-guided least-slack rule (Slack-FM / Slack-WLS): ordering, Eq. 2, work conservation."""

from __future__ import annotations

from pathlib import Path
from types import SimpleNamespace

import numpy as np
import pytest
import yaml

from mara.allocators.slack import SlackRule
from mara.sim.env import IDLE, BatchedEnv

ROOT = Path(__file__).resolve().parents[1]


def random_obs(rng, E=300, K=10, M=7):
    """Hand-made observations [E, K] with ties, cold tasks, exhausted caps and absent slots."""
    present = rng.random((E, K)) < 0.75
    task = np.where(present, np.arange(K)[None, :] + 100 * rng.integers(0, 3, (E, 1)), -1)
    tau = np.where(present, rng.integers(1, 40, (E, K)), 0)
    dl = tau + 17
    n_obs = np.where(present, rng.integers(0, 8, (E, K)), 0)
    cap = np.where(present, rng.integers(0, 3, (E, K)) * rng.integers(1, 50, (E, K)), 0)  # ~1/3 exhausted
    pred = np.where(n_obs >= 4, rng.integers(0, 60, (E, K)).astype(float), cap.astype(float))
    pred = np.where(rng.random((E, K)) < 0.1, tau.astype(float), pred)  # ties p̂ = τ (finishable, slack 0)
    return SimpleNamespace(
        present=present,
        task=task,
        remaining_time=tau,
        deadline=dl,
        n_obs=n_obs * present,
        cap_remaining=cap,
        pred_remaining=pred * present,
        n_nodes=M,
        max_active=K,
    )


def brute_force_order(obs, e):
    """The rule written out per task with Python's sort: the served slots of episode e, in node order."""
    keys = []
    for k in range(obs.present.shape[1]):
        if not obs.present[e, k] or obs.cap_remaining[e, k] <= 0:
            continue
        tau, p, dl, tk = obs.remaining_time[e, k], obs.pred_remaining[e, k], obs.deadline[e, k], obs.task[e, k]
        if obs.n_obs[e, k] < 4:
            keys.append(((1, dl, dl, tk), k))  # cold: earliest deadline
        elif p <= tau:
            keys.append(((0, tau - p, dl, tk), k))  # finishable: least slack
        else:
            keys.append(((2, dl, dl, tk), k))  # hopeless: earliest deadline
    return [k for _, k in sorted(keys)][: obs.n_nodes]


def test_matches_brute_force_ordering():
    rng = np.random.default_rng(0)
    obs = random_obs(rng)
    a = SlackRule().act(obs)
    for e in range(a.shape[0]):
        exp = brute_force_order(obs, e)
        assert list(a[e]) == exp + [IDLE] * (obs.n_nodes - len(exp)), e


def test_hand_made_observation():
    K, M = 6, 4
    present = np.array([[1, 1, 1, 1, 1, 1]], dtype=bool)
    n_obs = np.array([[0, 5, 5, 5, 2, 5]])
    tau = np.array([[50, 40, 30, 30, 30, 10]])
    pred = np.array([[999, 35, 10, 28, 999, 50]], dtype=float)  # slot 5 hopeless (50 > 10)
    cap = np.array([[999, 999, 999, 999, 999, 999]])
    obs = SimpleNamespace(
        present=present,
        task=np.arange(K)[None],
        remaining_time=tau,
        deadline=tau + 3,
        n_obs=n_obs,
        cap_remaining=cap,
        pred_remaining=pred,
        n_nodes=M,
        max_active=K,
    )
    # finishable by slack: slot 3 (2), slot 1 (5), slot 2 (20); then cold by deadline: slot 4 (33) before slot 0 (53)
    assert list(SlackRule().act(obs)[0]) == [3, 1, 2, 4]
    obs.cap_remaining = np.array([[999, 999, 999, 0, 999, 999]])  # slot 3 exhausted: skipped
    assert list(SlackRule().act(obs)[0]) == [1, 2, 4, 0]
    obs.n_nodes = 7  # more nodes than servable tasks: everyone but the exhausted task, hopeless last
    assert list(SlackRule().act(obs)[0]) == [1, 2, 4, 0, 5, IDLE, IDLE]


def test_never_twice_and_work_conserving():
    rng = np.random.default_rng(1)
    obs = random_obs(rng, E=500)
    a = SlackRule().act(obs)
    servable = (obs.present & (obs.cap_remaining > 0)).sum(axis=1)
    for e in range(a.shape[0]):
        s = a[e][a[e] != IDLE]
        assert len(np.unique(s)) == len(s)
        assert np.all(obs.present[e, s]) and np.all(obs.cap_remaining[e, s] > 0)
        assert len(s) == min(obs.n_nodes, servable[e])  # work-conserving


def test_slack_in_simulator_with_wls():
    from mara.curves.bank import default_bank_path, load_bank
    from mara.predictors.baselines.wls import WLSPredictor
    from mara.sim.workload import PAPER_TASK_SETS, generate_episodes

    bank = load_bank(default_bank_path())
    eps = generate_episodes(bank, bank.family_params, PAPER_TASK_SETS["ID"], 0.06, 1001, 6)
    alloc = SlackRule()
    env = BatchedEnv(eps, bank, predictor=WLSPredictor())
    obs = env.reset()
    while not env.done.all():
        a = alloc.act(obs)
        servable = (obs.present & (obs.cap_remaining > 0)).sum(axis=1)
        assert np.all((a != IDLE).sum(axis=1) == np.minimum(obs.n_nodes, servable))
        obs = env.step(a)[0]
    m = env.metrics()
    assert np.all(m["succeeded"] + m["failed"] == m["n_tasks"]) and m["succeeded"].sum() > 0


@pytest.mark.parametrize("name,predictor", [("Slack-FM", "fm"), ("Slack-WLS", "wls")])
def test_method_configs(name, predictor):
    from hydra.utils import instantiate
    from omegaconf import OmegaConf

    found = [ROOT / "conf" / group / "method" / f"{name}.yaml" for group in (".", "experiments")]
    cfg = yaml.safe_load(next(p for p in found if p.exists()).read_text())
    assert cfg["name"] == name and cfg["kind"] == "policy" and cfg["predictor"] == predictor
    alloc = instantiate(OmegaConf.create(cfg).allocator)
    assert isinstance(alloc, SlackRule) and alloc.name == name
