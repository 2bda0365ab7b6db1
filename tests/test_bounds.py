"""Bounds on the real simulator: every policy ≤ Clairvoyant ≤ Oracle; the stress scenario's known numbers."""

import numpy as np
import pytest

pytest.importorskip("ortools")

from mara.allocators.lara import LARA
from mara.allocators.rules import EDF, FIFO
from mara.bounds.clairvoyant import clairvoyant_batch
from mara.evaluate import evaluate
from mara.sim.env import BatchedEnv, run_episodes
from mara.sim.workload import (
    PAPER_TASK_SETS,
    generate_episodes,
)
from tests.test_entrypoints import tiny


class ShortestRemaining:
    """A further policy for the check: serve the tasks with the least remaining cap first."""

    name = "SR"

    def reset(self, n):
        pass

    def act(self, obs):
        from mara.allocators.base import take_smallest

        return take_smallest(obs.cap_remaining, obs.present, obs.n_nodes)


@pytest.mark.parametrize("load", [0.04, 0.1])
def test_policies_below_clairvoyant_below_oracle(small_bank, load):
    ep = generate_episodes(small_bank, small_bank.family_params, PAPER_TASK_SETS["ID"], load, 11, 6, n_steps=200)
    res = clairvoyant_batch(ep.arrival, ep.deadline, ep.need, ep.n_tasks, n_nodes=3)
    cv = np.array([r.upper_bound for r in res])
    assert all(r.optimal for r in res)
    assert (cv <= ep.oracle_successes()).all()
    for alloc in (FIFO(), EDF(), ShortestRemaining(), LARA()):
        m = run_episodes(BatchedEnv(ep, small_bank, n_nodes=3), alloc)
        assert (m["succeeded"] <= cv).all(), alloc.name


def test_stress_numbers(tmp_path, small_bank):
    res = evaluate(tiny(tmp_path, small_bank.path, "methods=[FIFO,EDF,Oracle,Clairvoyant]", "scenario=stress"))
    s = {m: res["summary"][m]["stress"]["0"]["mean"] for m in res["summary"]}
    assert s["FIFO"] == 0.0 and s["EDF"] == 0.0
    assert s["Oracle"] == pytest.approx(65.0) and s["Clairvoyant"] == pytest.approx(65.0)


def test_clairvoyant_workers_give_the_same_rows(tmp_path, small_bank):
    """Episodes solved in 2 worker processes: the same bounds, in the same episode order, as one process."""
    rows = {}
    for w in (1, 2):
        res = evaluate(
            tiny(
                tmp_path / f"w{w}",
                small_bank.path,
                "methods=[Clairvoyant]",
                "eval.episodes=3",
                f"+method_overrides={{Clairvoyant:{{workers:{w}}}}}",
            )
        )
        rows[w] = [(r["task_set"], r["root"], r["episode"], r["succeeded"], r["optimal"]) for r in res["rows"]]
    assert rows[1] == rows[2] and all(r[4] for r in rows[1]) and len(rows[1]) >= 3


def test_clairvoyant_workers_config_mistake(tmp_path, small_bank):
    from mara.core.config import ConfigError

    with pytest.raises(ConfigError, match="workers must be an integer >= 0"):
        evaluate(
            tiny(tmp_path, small_bank.path, "methods=[Clairvoyant]", "+method_overrides={Clairvoyant:{workers:-1}}")
        )


def test_results_say_what_the_hetero_bound_is(tmp_path, small_bank):
    """With switch costs the Clairvoyant relaxes them: results.json and results.md say it is a bound."""
    res = evaluate(
        tiny(
            tmp_path,
            small_bank.path,
            "methods=[FIFO,Clairvoyant]",
            "eval.episodes=1",
            "sim.node_speed=[2,2,1,1,1,1,1]",
            "sim.switch_cost=1",
        )
    )
    assert res["clairvoyant"]["bound_kind"] == "bound: switch costs relaxed"
    assert "here it is a bound: switch costs relaxed" in (tmp_path / "results.md").read_text()
    plain = evaluate(tiny(tmp_path / "plain", small_bank.path, "methods=[Clairvoyant]", "eval.episodes=1"))
    assert "bound_kind" not in plain["clairvoyant"]
