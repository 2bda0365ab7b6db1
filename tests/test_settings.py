"""Typed settings: the composed config is parsed once (mara/eval/settings.py) and the evaluation modules never read
it."""

import ast
import dataclasses
from pathlib import Path

import numpy as np
import pytest

from mara.core.config import ConfigError
from mara.eval.settings import SimSettings, from_cfg
from tests.test_entrypoints import cfg_for

REPO = Path(__file__).resolve().parents[1]
#: the evaluation modules that take settings, not the config
TAKE_SETTINGS = ("runner", "prediction", "prediction_cli", "decision_points", "lofo")


def test_evaluation_settings_hold_the_composed_values():
    cfg = cfg_for(
        "evaluate",
        [
            "sim.nodes=3",
            "sim.max_active=4",
            "sim.loads=[0.05,0.07]",
            "sim.queue_capacity=2",
            "sim.node_speed=[1,2,3]",
            "sim.switch_cost=1",
            "eval.roots=2",
            "eval.episodes=3",
            "eval.task_sets=[ID]",
            "eval.resume=false",
            "methods=[FIFO,EDF]",
        ],
    )
    s = from_cfg(cfg)
    assert s.kind == "evaluate" and s.prediction is None and s.lofo is None
    run = s.evaluation
    assert (run.sim.nodes, run.sim.max_active, run.sim.steps, run.sim.obs_every) == (3, 4, 500, 10)
    assert run.sim.loads == (0.05, 0.07) and run.sim.queue_capacity == 2 and run.sim.node_speed == (1, 2, 3)
    opts = run.sim.node_options()
    np.testing.assert_array_equal(opts["node_speed"], [1, 2, 3])
    assert opts["switch_cost"] == 1 and run.sim.hetero
    assert run.protocol.roots == [0, 1] and run.protocol.episodes == 3 and run.protocol.task_sets == ["ID"]
    assert run.protocol.loads == [0.05, 0.07] and run.protocol.scenario == "random"
    assert run.methods == ("FIFO", "EDF") and run.resume is False and run.tensorboard is True
    assert run.recorded["roots"] == 2 and "resume" not in run.recorded and "tensorboard" not in run.recorded
    assert set(run.workload.task_sets) == {"ID", "RL_OOD", "ViT_OOD"} and run.workload.family_table is None
    assert {"fm", "wls"} <= set(run.predictors)
    with pytest.raises(dataclasses.FrozenInstanceError):
        run.sim.nodes = 5


def test_identical_nodes_are_not_hetero_and_stress_is_parsed():
    run = from_cfg(cfg_for("evaluate", ["scenario=stress", "family_params=paper"])).evaluation
    assert not run.sim.hetero and run.sim.node_options() == {"node_speed": None, "switch_cost": 0}
    assert run.protocol.scenario == "stress" and run.workload.stress.short_need == (22, 35)
    assert run.workload.family_table["CNN_Cifar10"]["eps"] == pytest.approx(1.6601)


def test_only_the_experiment_kind_is_parsed():
    lofo = from_cfg(cfg_for("evaluate", ["experiment=prediction_lofo", "eval.episodes=0"]))  # no sim/eval read
    assert lofo.kind == "prediction_lofo" and lofo.evaluation is None and lofo.lofo.test_splits == ("fm_val", "pool")
    pred = from_cfg(cfg_for("evaluate", ["experiment=prediction"]))
    points = pred.prediction.decision_points
    assert pred.evaluation is not None and points.loads == (0.04, 0.07) and points.quantiles == (0.01, 0.05)
    assert points.policies == {"FM": "Slack-FM", "WLS": "Slack-WLS"} and pred.prediction.decision_quantiles == (
        0.01,
        0.05,
    )
    off = from_cfg(
        cfg_for("evaluate", ["experiment=prediction", "prediction.decision_points.enabled=false", "eval.episodes=0"])
    )
    assert off.evaluation is None and off.prediction.decision_points is None


@pytest.mark.parametrize(
    "override, needle",
    [
        ("sim.loads=[0.04,abc]", "sim.loads must be a number"),
        ("sim.nodes=0", "sim.nodes must be >= 1"),
        ("eval.roots=abc", "eval.roots must be an integer"),
        ("sim.node_speed=[1,2]", "one entry per node"),
    ],
)
def test_wrong_values_are_one_config_error(override, needle):
    with pytest.raises(ConfigError, match=needle):
        from_cfg(cfg_for("evaluate", [override]))


def test_sim_settings_check_a_plain_mapping():
    with pytest.raises(ConfigError, match="sim.max_active must be >= 1"):
        SimSettings.from_cfg(cfg_for("evaluate", ["sim.max_active=0"]).sim)


@pytest.mark.parametrize("module", TAKE_SETTINGS)
def test_evaluation_modules_never_take_the_config(module):
    """No function of these modules has a ``cfg`` parameter or reads a name ``cfg``: they receive settings."""
    tree = ast.parse((REPO / "mara" / "eval" / f"{module}.py").read_text())
    params = [a.arg for n in ast.walk(tree) if isinstance(n, (ast.FunctionDef, ast.Lambda)) for a in n.args.args]
    names = [n.id for n in ast.walk(tree) if isinstance(n, ast.Name)]
    assert "cfg" not in params and "cfg" not in names
