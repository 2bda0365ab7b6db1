"""The paper's setting on the trace replay for the methods that learn: a shipped MAT policy (MARA-suite's, on its
decision head) and rules on a sampled predictor (Slack-FM, LARA-FM: flow-matching samples) and on the decision head
(Slack-QR-q) give, task by task, the same status and finish step and the same per-episode metrics on the trace
replay (mara/traces/paper_setting.py) as on ``BatchedEnv``: the policy's observation, the predictor's refresh steps
and its inputs are the same on both engines, and so are its outputs, asked for per episode instead of for the stack."""

import numpy as np
import pytest
from test_paper_on_replay import assert_same

from mara.core.config import build_allocators, load_method_cfg, shipped_policy_checkpoints
from mara.curves.bank import default_bank_path, load_bank
from mara.predictors.factory import predictor_from
from mara.sim.env import BatchedEnv, run_episodes
from mara.sim.workload import PAPER_TASK_SETS, generate_episodes
from mara.traces.paper_setting import replay_episodes

CLUSTERS = {  # the paper's 7 identical nodes, and unequal nodes with a switch cost (MARA-suite's node head acts there)
    "identical": {},
    "speeds_switch": {"node_speed": [2, 2, 1, 1, 1, 1, 1], "switch_cost": 2},
}


@pytest.fixture(scope="module")
def bank():
    return load_bank(default_bank_path())


def method_parts(name: str, bank):
    """(a fresh allocator, the predictor) of method ``name`` as the evaluation builds it (a learned method: its first
    shipped policy)."""
    cfg = load_method_cfg(name)
    ckpts = shipped_policy_checkpoints(cfg, bank.path)[:1]
    if ckpts:
        cfg = load_method_cfg(name, {"checkpoints": ckpts})
    ((_, alloc),) = build_allocators(cfg)
    return alloc, predictor_from(cfg.get("predictor"), bank.path)


def check_both_engines(name: str, bank, cluster: dict, ep):
    """Run method ``name`` on ``ep`` on both engines and compare every task's outcome and every episode metric."""
    alloc, pred = method_parts(name, bank)
    env = BatchedEnv(ep, bank, n_nodes=7, max_active=10, predictor=pred, **cluster)
    run_episodes(env, alloc)
    speed = cluster.get("node_speed")
    alloc, _ = method_parts(name, bank)
    out = replay_episodes(
        alloc,
        ep,
        bank,
        7,
        10,
        10,
        pred,
        None,
        None if speed is None else np.asarray(speed),
        cluster.get("switch_cost", 0),
    )
    assert env.metrics()["succeeded"].sum() > 0 and env.metrics()["failed"].sum() > 0  # not a vacuous comparison
    assert_same(env, out, ep)


@pytest.mark.parametrize("cluster", list(CLUSTERS))
def test_a_shipped_policy_gives_the_same_outcomes_on_both_engines(bank, cluster):
    # MARA-suite acts on any cluster: its placement on identical nodes, its node head on unequal ones with switch costs
    ep = generate_episodes(bank, bank.family_params, PAPER_TASK_SETS["ID"], 0.07, 0, 2, n_steps=200)
    check_both_engines("MARA-suite", bank, CLUSTERS[cluster], ep)


@pytest.mark.parametrize("name", ["Slack-FM", "LARA-FM", "Slack-QR-q"])
def test_rules_on_sampled_and_learned_predictors_give_the_same_outcomes_on_both_engines(bank, name):
    ep = generate_episodes(bank, bank.family_params, PAPER_TASK_SETS["RL_OOD"], 0.07, 1, 2, n_steps=200)
    check_both_engines(name, bank, CLUSTERS["speeds_switch" if name == "Slack-FM" else "identical"], ep)
