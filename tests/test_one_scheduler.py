"""One scheduler, every engine: a throwaway rule written once (its module + one method YAML, in a temporary folder on
``MARA_CONF_PATH`` and ``sys.path``) runs on the paper's protocol (``mara.evaluate``), on a job trace
(``experiment=trace`` on the shipped sample) and in live mode (inline workers), through the scheduler interface
(``mara.sched.interface``) and the priority-rule base (``mara.allocators.rules.PriorityRule``)."""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pytest

from mara.allocators.rules import EDF
from mara.core.config import available_methods, load_method_cfg
from mara.sched.interface import Decision
from mara.sched.sizing import greedy_levels
from mara.traces.replay import JobState, replay
from tests.conftest import lay_out_plugin, run_python

REPO = Path(__file__).resolve().parents[1]

RULE_MODULE = '''
"""A throwaway rule: the latest arrival first."""
from mara.allocators.rules import PriorityRule


class LatestFirst(PriorityRule):
    name = "LatestFirst"

    def keys(self, view):
        return (-view.arrival_rank,)
'''

RULE_YAML = """
name: LatestFirst
kind: policy
predictor: null
allocator:
  _target_: latest_first.LatestFirst
trace_scheduler:
  _target_: latest_first.LatestFirst
trace_count: none
report: {colour: "#654321", marker: "x", order: 206}
lists: []
"""


@pytest.fixture
def latest_first(tmp_path, monkeypatch):
    """The two files, in a folder on ``MARA_CONF_PATH`` and ``sys.path`` (and the subprocesses' ``PYTHONPATH``)."""
    return lay_out_plugin(
        tmp_path, monkeypatch, {"latest_first.py": RULE_MODULE}, {"method/LatestFirst.yaml": RULE_YAML}
    )


def test_a_rule_written_once_runs_on_the_paper_protocol_a_trace_and_live(latest_first, small_bank):
    assert "LatestFirst" in available_methods() and load_method_cfg("LatestFirst").trace_scheduler
    paper, trace = latest_first / "paper", latest_first / "trace"
    p = run_python(
        "-m",
        "mara.evaluate",
        "methods=[LatestFirst,FIFO]",
        f"bank.path={small_bank.path}",
        "eval.roots=1",
        "eval.episodes=1",
        "sim.loads=[0.04]",
        "eval.tensorboard=false",
        f"hydra.run.dir={paper}",
    )
    assert p.returncode == 0, p.stderr
    data = json.loads((paper / "results.json").read_text())
    assert set(data["summary"]) == {"LatestFirst", "FIFO"} and not data.get("failed")

    p = run_python(
        "-m",
        "mara.evaluate",
        "experiment=trace",
        "methods=[LatestFirst,EDF]",
        "trace.first_jobs=40",
        "eval.tensorboard=false",
        f"hydra.run.dir={trace}",
    )
    assert p.returncode == 0, p.stderr
    rows = json.loads((trace / "results.json").read_text())["rows"]
    assert {r["method"] for r in rows} == {"LatestFirst", "EDF"} and len(rows) == 80

    from mara.live.run import live_main
    from tests.test_live import cfg_for

    res = live_main(cfg_for(latest_first / "live", "methods=[LatestFirst]", "live.figure=false", "live.workers=inline"))
    assert res["summary"]["LatestFirst"]["jobs"] > 0


def test_the_trace_engine_applies_a_decision_and_the_scheduler_writes_nothing():
    # two jobs on 4 GPUs, speeds 1 / 2 / 4 iterations per second on 1 / 2 / 4 GPUs, 8 iterations each; EDF gives the
    # earlier deadline all 4 GPUs (done at 2 s), then the other (done at 2 + 2 s)
    tput = np.zeros((2, 7))
    tput[:, :3] = [1.0, 2.0, 4.0]
    st = JobState(np.array([0, 0]), np.array([9, 3]), tput, np.array([2, 2]), np.array([8.0, 8.0]), 4, slot=1)
    seen = []

    class Watch(EDF):
        def decide(self, now, arrivals):
            before = {k: getattr(self.view, k).copy() for k in ("status", "gpus", "finish", "end_event", "started")}
            d = super().decide(now, arrivals)
            assert isinstance(d, Decision)
            assert all(np.array_equal(getattr(self.view, k), v, equal_nan=True) for k, v in before.items())
            seen.append((now, d.jobs.tolist(), d.gpus.tolist()))
            return d

    rep = replay(st, Watch(), np.zeros(2, dtype=np.int64), 1)
    assert seen[0] == (0, [1, 0], [4, 0])
    assert rep.finish.tolist() == [4.0, 2.0] and rep.met.tolist() == [True, True]


def test_one_gpu_per_job_is_the_special_case_of_elastic_levels():
    # levels {1}: the first n_gpus jobs of the order get one GPU each, the paper's one task per node
    got = greedy_levels(np.ones(5, dtype=np.int64), np.array([1]), 3)
    assert got.tolist() == [1, 1, 1, 0, 0]
    assert greedy_levels(np.array([4, 4, 1]), np.array([1, 2, 4]), 6).tolist() == [4, 2, 0]
