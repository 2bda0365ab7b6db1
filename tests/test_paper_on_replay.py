"""The paper's setting is a special case of the trace simulator: every rule that acts on the paper's ``Observation``
gives, on the event-driven trace replay (one-GPU jobs on one-GPU nodes, one step per second, mara/traces/
paper_setting.py), the same per-task outcomes (status and finish step) and the same per-episode metrics as
``BatchedEnv`` on identical episodes: identical nodes, a bounded waiting queue, node speeds, switch costs."""

import numpy as np
import pytest
from omegaconf import OmegaConf

from mara.allocators.rules import EDF, FIFO
from mara.allocators.slack import SlackRule
from mara.core.config import ConfigError
from mara.curves.bank import default_bank_path, load_bank
from mara.eval.runner import evaluate_methods
from mara.predictors.baselines.truth import TruthPredictor
from mara.sched.interface import Decision
from mara.sim.env import BatchedEnv, run_episodes
from mara.sim.settings import ENGINES, SimSettings
from mara.sim.workload import PAPER_TASK_SETS, generate_episodes
from mara.traces.paper_setting import replay_episodes
from mara.traces.replay import EXPIRED, JobState, replay

CLUSTERS = {  # BatchedEnv keyword arguments beyond the shared ones
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


def both_engines(bank, ep, rule: str, cluster: dict, n_nodes: int = 3, max_active: int = 5):
    """(BatchedEnv, (status, finish, metrics) of the trace replay) of one rule on the same episodes."""
    make_alloc, make_pred = RULES[rule]
    pred = None if make_pred is None else make_pred()
    env = BatchedEnv(ep, bank, n_nodes=n_nodes, max_active=max_active, predictor=pred, **cluster)
    run_episodes(env, make_alloc())
    speed = cluster.get("node_speed")
    out = replay_episodes(
        make_alloc(),
        ep,
        bank,
        n_nodes,
        max_active,
        10,
        pred,
        cluster.get("queue_capacity"),
        None if speed is None else np.asarray(speed),
        cluster.get("switch_cost", 0),
    )
    return env, out


def assert_same(env, out, ep):
    status, finish, metrics = out
    v = ep.valid
    assert np.array_equal(np.where(v, status, 0), np.where(v, env.status, 0))
    assert np.array_equal(np.where(v, finish, 0), np.where(v, env.finish_time, 0))
    ref = env.metrics()
    assert set(metrics) == set(ref)
    for k in ref:
        assert np.array_equal(np.asarray(metrics[k]), np.asarray(ref[k]), equal_nan=True), k


@pytest.mark.parametrize("cluster", list(CLUSTERS))
@pytest.mark.parametrize("rule", list(RULES))
def test_same_outcomes_as_the_paper_simulator(small_bank, cluster, rule):
    # 16 busy episodes (load 0.25 on 3 nodes, admission limit 5): queues, expiries in slots and in the queue, turn-aways
    ep = generate_episodes(small_bank, small_bank.family_params, PAPER_TASK_SETS["RL_OOD"], 0.25, 11, 16, n_steps=120)
    env, out = both_engines(small_bank, ep, rule, CLUSTERS[cluster])
    assert env.metrics()["failed"].sum() > 0 and env.metrics()["succeeded"].sum() > 0  # not a vacuous comparison
    assert_same(env, out, ep)


def test_same_outcomes_on_the_shipped_bank_at_a_paper_load():
    bank = load_bank(default_bank_path())
    ep = generate_episodes(bank, bank.family_params, PAPER_TASK_SETS["ID"], 0.07, 0, 3)
    for rule in RULES:
        env, out = both_engines(bank, ep, rule, {}, n_nodes=7, max_active=10)
        assert_same(env, out, ep)


def test_expiry_is_off_by_default_and_ends_a_late_job_when_on():
    # one job of 10 s on one GPU, due at 5 s: without expiry it finishes late (the trace setting), with it leaves at 5
    class Run:
        name, caps = "run", "table"

        def start(self, s):
            pass

        def decide(self, now, arrivals):
            ones = np.ones(len(arrivals), dtype=np.int64)
            return Decision(jobs=arrivals, gpus=ones, finish=now + 10.0 * ones, admit=arrivals)

    for expire in (False, True):
        st = JobState(
            np.array([0]),
            np.array([5]),
            np.ones((1, 1)),
            np.zeros(1, dtype=np.int64),
            np.array([10.0]),
            1,
            slot=1,
            expire=expire,
        )
        rep = replay(st, Run(), np.zeros(1, dtype=np.int64), 1)
        assert not rep.met[0]
        assert (st.status[0] == EXPIRED) == expire
        assert st.ended[0] == (5 if expire else 10)


def test_the_evaluation_runner_gives_the_same_rows_on_either_engine(small_bank):
    ep = generate_episodes(small_bank, small_bank.family_params, PAPER_TASK_SETS["ID"], 0.25, 5, 4, n_steps=120)
    rows = {}
    for engine in ENGINES:
        sim = SimSettings(
            nodes=3, max_active=5, steps=120, loads=(0.25,), node_speed=(1, 2, 1), switch_cost=1, engine=engine
        )
        rows[engine], _, notes = evaluate_methods(
            ["FIFO", "Slack-Truth", "Oracle"], ep, small_bank, sim, {}, {}, log=lambda *a: None
        )
        assert not notes
    assert rows["replay"] == rows["batched"]


def test_an_unknown_engine_is_refused_in_one_line():
    with pytest.raises(ConfigError, match="sim.engine must be one of batched, replay"):
        SimSettings.from_cfg(
            OmegaConf.create({"loads": [0.05], "nodes": 7, "max_active": 10, "steps": 500, "engine": "gym"})
        )
