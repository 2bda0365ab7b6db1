"""The paper's evaluation pinned on the shipped curve bank: FIFO, EDF, Slack-Truth and Oracle through the evaluation
runner (the path every shipped number takes) at two paper loads and two task sets, on the paper's identical nodes and
on nodes with speeds and a switch cost. Every result row and every task's final status and finish step is hashed
against recorded values, so any change to a number the paper reports fails here; only a deliberate change of the
simulator's rules or the workload re-records them (``python tests/test_paper_fingerprint.py`` prints the values).
The same values come out of the trace simulator running the paper's setting (``sim.engine=replay``)."""

import dataclasses
import hashlib
import json

import numpy as np
import pytest

from mara.core.config import build_allocators, load_method_cfg
from mara.curves.bank import default_bank_path, load_bank
from mara.eval.runner import build_episodes, evaluate_methods
from mara.eval.settings import EvalProtocol, SimSettings, Workload
from mara.predictors.factory import predictor_from
from mara.sim.env import BatchedEnv, run_episodes
from mara.sim.workload import PAPER_TASK_SETS
from mara.traces.paper_setting import replay_episodes

METHODS = ("FIFO", "EDF", "Slack-Truth", "Oracle")
RULES = ("FIFO", "EDF", "Slack-Truth")  # the methods that act in the simulator (Oracle is computed from the episode)
PROTOCOL = EvalProtocol(task_sets=["ID", "RL_OOD"], loads=[0.04, 0.07], roots=[0], episodes=3)
CLUSTERS = {  # the paper's 7 identical nodes, and 7 nodes of speeds 1-3 with a 2-step switch cost
    "identical": SimSettings(loads=(0.04, 0.07)),
    "speeds_switch": SimSettings(loads=(0.04, 0.07), node_speed=(1, 1, 2, 2, 3, 1, 1), switch_cost=2),
}

# sha256 of each cluster's result rows and per-task outcomes (_fingerprint)
EXPECTED = {
    "identical": "09a0a6918a303630d68373b6206e9d38a45a9bd9cacb07e79421fc1e10f4798d",
    "speeds_switch": "959fe0a66130c91f9114ba755bef0183df7f7ae9363475ddbd66d2c9e32ebd2a",
}
# successes summed over the episodes per method (a readable first failure when a hash differs)
EXPECTED_SUCCEEDED = {
    "identical": {"FIFO": 138, "EDF": 145, "Slack-Truth": 188, "Oracle": 216},
    "speeds_switch": {"FIFO": 250, "EDF": 248, "Slack-Truth": 277, "Oracle": 295},
}


def paper_episodes(bank, sim: SimSettings):
    """The fixed episodes of the fingerprint (every draw fixed by the evaluation root)."""
    return build_episodes(Workload(task_sets=PAPER_TASK_SETS), bank, PROTOCOL, sim.steps)


def task_outcomes(method: str, ep, bank, sim: SimSettings):
    """(status [E, N], finish step [E, N]) of one rule's run, as the evaluation runner steps it (``sim.engine``)."""
    mcfg = load_method_cfg(method)
    ((_, alloc),) = build_allocators(mcfg)
    if sim.engine == "replay":
        opts = sim.node_options()
        status, finish, _ = replay_episodes(
            alloc,
            ep,
            bank,
            sim.nodes,
            sim.max_active,
            sim.obs_every,
            predictor_from(mcfg.get("predictor")),
            sim.queue_capacity,
            opts["node_speed"],
            opts["switch_cost"],
        )
        return np.where(ep.valid, status, 0), np.where(ep.valid, finish, -1)
    env = BatchedEnv(
        ep,
        bank,
        sim.nodes,
        sim.max_active,
        sim.obs_every,
        predictor=predictor_from(mcfg.get("predictor")),
        queue_capacity=sim.queue_capacity,
        **sim.node_options(),
    )
    run_episodes(env, alloc)
    return np.where(ep.valid, env.status, 0), np.where(ep.valid, env.finish_time, -1)


def _fingerprint(bank, cluster: str, engine: str = "batched"):
    """(sha256 of the result rows and every rule's per-task outcomes, {method: successes summed})."""
    sim = dataclasses.replace(CLUSTERS[cluster], engine=engine)
    ep = paper_episodes(bank, sim)
    rows, _, notes = evaluate_methods(list(METHODS), ep, bank, sim, {}, {}, log=lambda *a: None)
    assert not notes, notes
    h = hashlib.sha256(json.dumps(rows, sort_keys=True).encode())
    for m in RULES:
        for a in task_outcomes(m, ep, bank, sim):
            h.update(np.ascontiguousarray(a, dtype=np.int64).tobytes())
    succ = {m: sum(r["succeeded"] for r in rows if r["method"] == m) for m in METHODS}
    return h.hexdigest(), succ


@pytest.fixture(scope="module")
def shipped_bank():
    return load_bank(default_bank_path())


@pytest.mark.parametrize("engine", ["batched", pytest.param("replay", marks=pytest.mark.slow)])
@pytest.mark.parametrize("cluster", list(CLUSTERS))
def test_paper_evaluation_fingerprint(shipped_bank, cluster, engine):
    digest, succ = _fingerprint(shipped_bank, cluster, engine)
    assert succ == EXPECTED_SUCCEEDED[cluster]
    assert digest == EXPECTED[cluster]


if __name__ == "__main__":
    bank = load_bank(default_bank_path())
    for c in CLUSTERS:
        for engine in ("batched", "replay"):
            print(c, engine, *_fingerprint(bank, c, engine))
