"""The selection bound Slack-Truth-chosen: the least-slack rule on the true remaining batches, serving only the tasks
the Clairvoyant's best schedule completes; its schedule runs in the simulator with the switch costs."""

from __future__ import annotations

import numpy as np
import pytest

from mara.allocators.slack import SlackRule
from mara.eval.runner import chosen_tasks
from mara.predictors.baselines.truth import TruthPredictor
from mara.sim.env import IDLE, BatchedEnv, TaskStatus
from mara.sim.env import run_episodes as run
from mara.sim.workload import PAPER_TASK_SETS, generate_episodes


class Recording:
    """Wraps an allocator and records every (episode, task) it serves."""

    def __init__(self, inner):
        self.inner, self.name, self.served = inner, inner.name, set()

    def reset(self, n):
        self.inner.reset(n)

    def act(self, obs):
        a = self.inner.act(obs)
        for e, n in zip(*np.nonzero(a != IDLE)):
            self.served.add((int(e), int(obs.task[e, a[e, n]])))
        return a


@pytest.mark.parametrize("speed, cost", [([2, 1, 1], 2), ([1, 1, 1], 0)])
def test_chosen_rule_serves_only_the_chosen_tasks_and_stays_below_the_bound(small_bank, speed, cost):
    pytest.importorskip("ortools")
    from mara.bounds.clairvoyant_k import clairvoyant_k_batch

    ep = generate_episodes(small_bank, small_bank.family_params, PAPER_TASK_SETS["ID"], 0.1, 23, 4, n_steps=150)
    res = clairvoyant_k_batch(
        ep.arrival, ep.deadline, ep.need, ep.n_tasks, n_nodes=3, max_active=10, node_speed=speed, time_limit_s=3
    )
    chosen = chosen_tasks(res, ep.arrival.shape[1])
    assert chosen.sum(axis=1).tolist() == [r.successes for r in res]
    rule = SlackRule(name="Slack-Truth-chosen", displace=True)
    rule.restrict_to(chosen)
    rec = Recording(rule)
    env = BatchedEnv(ep, small_bank, n_nodes=3, predictor=TruthPredictor(), node_speed=speed, switch_cost=cost)
    m = run(env, rec)
    assert rec.served and all(chosen[e, k] for e, k in rec.served)  # never a task outside the chosen set
    succeeded = env.status == TaskStatus.SUCCEEDED
    assert not (succeeded & ~chosen).any()
    bound = np.array([r.upper_bound for r in res])
    assert (m["succeeded"] <= bound).all() and m["succeeded"].sum() > 0
    rule.restrict_to(None)  # unrestricted again: the plain rule's actions
    plain = run(
        BatchedEnv(ep, small_bank, n_nodes=3, predictor=TruthPredictor(), node_speed=speed, switch_cost=cost),
        SlackRule(displace=True),
    )
    again = run(
        BatchedEnv(ep, small_bank, n_nodes=3, predictor=TruthPredictor(), node_speed=speed, switch_cost=cost), rule
    )
    np.testing.assert_array_equal(plain["succeeded"], again["succeeded"])


def test_chosen_tasks_pads_short_episodes():
    from types import SimpleNamespace

    res = [SimpleNamespace(chosen=np.array([True, False])), SimpleNamespace(chosen=np.array([False, True, True]))]
    assert chosen_tasks(res, 4).tolist() == [[True, False, False, False], [False, True, True, False]]


def test_the_method_runs_and_reports_the_solve_beside_its_successes():
    pytest.importorskip("ortools")
    from mara.core.config import load_method_cfg
    from mara.curves.bank import default_bank_path, load_bank
    from mara.eval.runner import evaluate_one
    from mara.eval.settings import SimSettings
    from mara.predictors.factory import predictor_config

    bank = load_bank(default_bank_path())
    ep = generate_episodes(bank, bank.family_params, PAPER_TASK_SETS["ID"], 0.06, 1001, 2, n_steps=150)
    sim = SimSettings(node_speed=(2, 2, 1, 1, 1, 1, 1), switch_cost=2)
    cfg = load_method_cfg("Slack-Truth-chosen", {"chosen_by": {"time_limit_s": 2.0, "workers": 1}})
    rows = evaluate_one("Slack-Truth-chosen", cfg, ep, bank, sim, {"truth": predictor_config("truth")}, {})
    assert len(rows) == ep.E
    for r in rows:  # realised with switch costs <= the best relaxed schedule's successes <= the proven bound
        assert r["succeeded"] <= r["clairvoyant_found"] <= r["clairvoyant_bound"]  # it serves only the chosen tasks
        assert r["optimal"] == (r["clairvoyant_found"] == r["clairvoyant_bound"])


def test_chosen_by_on_a_rule_that_cannot_be_restricted_is_one_line():
    from mara.core.config import ConfigError, load_method_cfg
    from mara.curves.bank import default_bank_path, load_bank
    from mara.eval.runner import evaluate_one
    from mara.eval.settings import SimSettings

    bank = load_bank(default_bank_path())
    ep = generate_episodes(bank, bank.family_params, PAPER_TASK_SETS["ID"], 0.06, 1001, 1, n_steps=50)
    cfg = load_method_cfg("FIFO", {"chosen_by": {"time_limit_s": 1.0}})
    with pytest.raises(ConfigError, match="chosen_by needs a rule"):
        evaluate_one("FIFO", cfg, ep, bank, SimSettings(), {}, {})


def test_preflight_takes_the_solve_options_and_refuses_them_elsewhere():
    from mara.core.config import ConfigError
    from mara.preflight import check_method_override

    check_method_override("Slack-Truth-chosen", {"chosen_by": {"time_limit_s": 60.0}}, {})
    with pytest.raises(ConfigError, match="Slack-QR has no setting 'chosen_by'"):
        check_method_override("Slack-QR", {"chosen_by": {"time_limit_s": 60.0}}, {})
