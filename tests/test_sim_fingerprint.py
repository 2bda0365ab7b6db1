"""The simulator's outputs pinned: FIFO, EDF and Slack-Truth on fixed random episodes, on identical nodes, with a
bounded queue, and on nodes with speeds and switch costs. Every per-step allocation, task status, processed count and
reward and every per-episode outcome is hashed against recorded values, so a refactor that changes any decision or
number fails here; only a deliberate change of the simulator's rules re-records them."""

import hashlib

import numpy as np
import pytest

from mara.allocators.rules import EDF, FIFO
from mara.allocators.slack import SlackRule
from mara.predictors.baselines.truth import TruthPredictor
from mara.sim.env import BatchedEnv, TaskStatus
from mara.sim.workload import PAPER_TASK_SETS, generate_episodes

NODES = {  # name -> BatchedEnv keyword arguments beyond the shared ones
    "identical": {},
    "queue2": {"queue_capacity": 2},
    "speeds": {"node_speed": [2, 1, 3]},
    "switch": {"switch_cost": 2},
    "speeds_switch": {"node_speed": [1, 2, 3], "switch_cost": 1},
}
RULES = {
    "FIFO": (FIFO, None),
    "EDF": (EDF, None),
    "Slack-Truth": (lambda: SlackRule(name="Slack-Truth"), TruthPredictor),
}

# sha256 of each configuration's trace (_trace)
EXPECTED = {
    ("identical", "FIFO"): "ce7d005b11fe5241ae0ea9909a786f838e9d30572addda2df61be2062196854e",
    ("identical", "EDF"): "014d6899022a854341102db0abdb24dc493769f4cc33781bf40f8e2fcb4753bf",
    ("identical", "Slack-Truth"): "64ff629e528d7b7828c21544479152364f2db25d035c7a68ee6b403e8779b3c4",
    ("queue2", "FIFO"): "d94ccf476aa9960ff6ce37690b815bf33edf9aa52183940000b96075e90a254c",
    ("queue2", "EDF"): "c665fe1538ee7765ff2399db2cde5e918cf578240b3c6ef90f46c086a1622d21",
    ("queue2", "Slack-Truth"): "8c710e3e8ccf184f863dbe260239cf872489eacc193441b0ed24aeaf5d6bf9b2",
    ("speeds", "FIFO"): "0cca18d0b1b14b7f346d184b9ffe88b0cf806685398c34d66c362f1c3185cd59",
    ("speeds", "EDF"): "d7605c1bd4186b72af0b09aaf4aaa60e6df974686ea8bda0c86e9ab7264d85f2",
    ("speeds", "Slack-Truth"): "9dec5fc2a9172e0c3b65204aaa6ae1e402c6f7197af9fb7108d4678e44a4df92",
    ("switch", "FIFO"): "05f632b2cb5f63b8041cfc9bf94275b8cbe6a10518e13df5db62b1dbad4ca5b9",
    ("switch", "EDF"): "f38a984163a5fdc8515aeb755d2ee63b7b79568ee22888468c5f7bf26c7c1daa",
    ("switch", "Slack-Truth"): "c337ab4b0c1c3983268e0a3ecc6da1c7a9f7389f3335f23e4fd8e44f700d8bb7",
    ("speeds_switch", "FIFO"): "bab03a69a056bee29589a0aa1dc17a0f43e289f6cf82544304811e140b19d014",
    ("speeds_switch", "EDF"): "bcdb57ab77c754018362da8671df78d56813aca4f36e68b88e75dc8b3c823b0e",
    ("speeds_switch", "Slack-Truth"): "6041f8d08eada80808d79aa803137899223a3d3766fe38192d8b37a32b11187b",
}
# per-episode successes of the same runs (a readable first failure when a hash differs)
EXPECTED_SUCCEEDED = {
    ("identical", "FIFO"): [5, 4, 4, 3, 5],
    ("identical", "EDF"): [5, 4, 4, 3, 6],
    ("identical", "Slack-Truth"): [5, 5, 4, 5, 6],
    ("queue2", "FIFO"): [3, 2, 3, 2, 5],
    ("queue2", "EDF"): [3, 2, 3, 2, 5],
    ("queue2", "Slack-Truth"): [3, 3, 4, 3, 7],
    ("speeds", "FIFO"): [8, 8, 8, 7, 7],
    ("speeds", "EDF"): [8, 9, 8, 7, 7],
    ("speeds", "Slack-Truth"): [9, 9, 10, 10, 8],
    ("switch", "FIFO"): [5, 4, 4, 3, 5],
    ("switch", "EDF"): [5, 4, 4, 3, 6],
    ("switch", "Slack-Truth"): [5, 5, 4, 5, 6],
    ("speeds_switch", "FIFO"): [8, 8, 8, 6, 7],
    ("speeds_switch", "EDF"): [8, 9, 8, 7, 7],
    ("speeds_switch", "Slack-Truth"): [9, 9, 10, 10, 8],
}


def _trace(bank, nodes: str, rule: str):
    """(sha256 of every step's actions, statuses, processed batches, rewards and the final metrics, successes [E])."""
    ep = generate_episodes(bank, bank.family_params, PAPER_TASK_SETS["ID"], 0.25, 7, 5, n_steps=120)
    make_alloc, make_pred = RULES[rule]
    env = BatchedEnv(
        ep,
        bank,
        n_nodes=3,
        max_active=5,
        predictor=None if make_pred is None else make_pred(),
        compute_reward=True,
        **NODES[nodes],
    )
    alloc = make_alloc()
    obs = env.reset()
    alloc.reset(ep.E)
    h = hashlib.sha256()
    for _ in range(ep.horizon + ep.n_steps + 2):
        if env.done.all():
            break
        actions = np.asarray(alloc.act(obs), dtype=np.int64)
        obs, reward, done, won = env.step(actions)
        for a in (
            actions,
            env.status.astype(np.int64),
            env.slot_task,
            env.slot_s,
            won.astype(np.int64),
            done.astype(np.int64),
        ):
            h.update(np.ascontiguousarray(a).tobytes())
        h.update(np.round(reward, 9).tobytes())
    assert env.done.all()
    m = env.metrics()
    for k in sorted(m):
        h.update(k.encode())
        h.update(np.round(np.asarray(m[k], dtype=np.float64), 9).tobytes())
    h.update(env.finish_time.tobytes())
    h.update(env.ready_time.tobytes())
    return h.hexdigest(), m["succeeded"].tolist()


@pytest.mark.parametrize("nodes", list(NODES))
@pytest.mark.parametrize("rule", list(RULES))
def test_simulator_fingerprint(small_bank, nodes, rule):
    digest, succeeded = _trace(small_bank, nodes, rule)
    assert succeeded == EXPECTED_SUCCEEDED[nodes, rule]
    assert digest == EXPECTED[nodes, rule]


def test_task_status_values_are_the_stored_integers():
    # stored results (live_results.json "status") and the simulator's int8 arrays hold these integers
    assert {s.name: int(s) for s in TaskStatus} == {
        "PENDING": 0,
        "QUEUED": 1,
        "ACTIVE": 2,
        "SUCCEEDED": 3,
        "FAILED": 4,
        "TURNED_AWAY": 5,
    }
    assert TaskStatus.left(np.arange(6)).tolist() == [False, False, False, True, True, True]
