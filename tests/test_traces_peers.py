"""Gandiva, Tiresias and Themis on job traces: hand-worked tiny traces, the fair-share program, and per-job agreement
with the ElasticFlow authors' simulator on the shipped sample (its outcomes recorded in docs/fidelity/)."""

from __future__ import annotations

import hashlib
import json
from pathlib import Path

import numpy as np
import pytest

from mara.allocators.rules import EDF
from mara.traces.gandiva import TraceGandiva
from mara.traces.replay import JobState, replay
from mara.traces.schema import SHIPPED_SAMPLE, load_trace, parse_cluster
from mara.traces.themis import TraceThemis, fair_shares
from mara.traces.throughput import LEVELS, job_speeds, known_models, load_table
from mara.traces.tiresias import TraceTiresias

ROOT = Path(__file__).resolve().parents[1]
PEER = ROOT / "docs" / "fidelity" / "trace_peer.json"
HEADER = "job_id,submission_time,num_iteration,model_name,deadline,batch_size,num_gpu,duration\n"
SPEED = load_table()[("resnet50", 64)]  # measured iters/s of resnet50 at batch 64 by level


def _replay(path, cluster, sched):
    cl = parse_cluster(cluster)
    tr = load_trace(path, cl, known_models=known_models())
    tput, ml = job_speeds(tr, sched.caps, cl.gpus)
    st = JobState(tr.submit, tr.deadline, tput, ml, tr.iterations.copy(), cl.gpus)
    return tr, replay(st, sched, np.zeros(tr.n_jobs, dtype=np.int64), 1)


def _rows(tmp_path, jobs) -> Path:
    """``jobs``: (submit, gpus, seconds of work there, deadline) -> a trace of resnet50 bs64 jobs."""
    lines = []
    for i, (sub, g, secs, ddl) in enumerate(jobs):
        it = int(secs * SPEED[int(np.searchsorted(LEVELS, g))])
        lines.append(f"j{i},{sub},{it},resnet50,{ddl},64,{g},{secs}\n")
    p = tmp_path / "t.csv"
    p.write_text(HEADER + "".join(lines))
    return p


def test_tiresias_lets_a_new_job_preempt_one_past_its_first_queue(tmp_path):
    # an 8-GPU job has 3,250 GPU-seconds after ~406 s: the one arriving at 600 s starts in the first queue and takes
    # its GPUs; the old one resumes when the new one ends
    p = _rows(tmp_path, [(0, 8, 3000, 100000), (600, 8, 1000, 100000)])
    _, rep = _replay(p, "n1g8", TraceTiresias())
    assert rep.started[0] == 0 and rep.started[1] == 600
    assert rep.finish[1] < rep.finish[0]
    assert rep.finish[0] > 3000 + 1000  # waited for the newer job in full
    assert rep.met.all()


def test_tiresias_thresholds_are_its_queues(tmp_path):
    # with a limit above everything attained, the first job keeps its queue and its GPUs: no preemption
    p = _rows(tmp_path, [(0, 8, 3000, 100000), (600, 8, 1000, 100000)])
    _, rep = _replay(p, "n1g8", TraceTiresias(thresholds=(10**9, 2 * 10**9)))
    assert rep.finish[0] < rep.started[1] + 1000 <= rep.finish[1]


def test_gandiva_time_slices_a_ninth_job_on_eight_gpus(tmp_path):
    eight = _replay(_rows(tmp_path, [(0, 1, 600, 100000)] * 8), "n1g8", TraceGandiva())[1]
    nine = _replay(_rows(tmp_path, [(0, 1, 600, 100000)] * 9), "n1g8", TraceGandiva())[1]
    assert np.nanmax(eight.finish) < 600 + 60  # all eight run at once (set-up seconds at most)
    assert np.nanmax(nine.finish) >= 600 * 9 / 8  # nine jobs share eight GPUs by minutes
    assert nine.occupancy.max() <= 8


def test_gandiva_gives_a_node_to_one_job_size_and_the_other_waits_for_it(tmp_path):
    # one node: the 2-GPU job's node set takes it; the 4-GPU job waits until that set is given back at 300 s
    _, rep = _replay(_rows(tmp_path, [(0, 2, 300, 100000), (0, 4, 500, 100000)]), "n1g8", TraceGandiva(overhead=False))
    assert rep.finish.tolist() == [300.0, 800.0]
    assert rep.started.tolist() == [0.0, 300.0]


def test_fair_shares_equalise_the_worst_fairness_when_gpus_are_short():
    a, b, c = np.array([0.0, 100.0]), np.array([50.0, 50.0]), np.array([100.0, 100.0])
    x = fair_shares(a, b, c, np.array([1.0, 1.0]), 1)
    rho = (a + b / x) / c
    assert x.sum() == pytest.approx(1.0)
    assert rho[0] == pytest.approx(rho[1], rel=1e-6)
    assert x[1] > x[0]  # the job that has waited longer gets the larger share
    roomy = fair_shares(a, b, c, np.array([1.0, 1.0]), 2)  # room for both: the worst is the full-share one's
    assert roomy[1] == 1.0 and np.all((a + b / roomy) / c <= (a[1] + b[1]) / c[1] + 1e-12)


def test_themis_runs_every_job_and_never_more_gpus_than_the_cluster(tmp_path):
    p = _rows(tmp_path, [(0, 8, 900, 100000), (30, 4, 600, 100000), (30, 4, 600, 100000), (200, 2, 300, 100000)])
    _, rep = _replay(p, "n1g8", TraceThemis())
    assert rep.met.all() and rep.occupancy.max() <= 8
    assert np.all(rep.finish % 60 == 0)  # jobs end at the end of a lease


def _peer_case(name: str) -> dict:
    case = json.loads(PEER.read_text())["cases"][name]
    assert case["sha256"] == hashlib.sha256(SHIPPED_SAMPLE.read_bytes()).hexdigest()  # the same bytes as shipped
    return case["results"]


@pytest.mark.parametrize("sched", [EDF, TraceGandiva, TraceTiresias, TraceThemis], ids=lambda c: c.__name__)
def test_the_same_jobs_miss_as_in_the_peers_own_simulator_on_the_shipped_sample(sched):
    """The shipped sample is ITP cluster01's first 300 jobs; the peer's per-job outcomes there are recorded."""
    s = sched()
    peer = _peer_case("cluster01_first300")[s.name]
    _, rep = _replay(SHIPPED_SAMPLE, "n64g8", s)
    assert sorted(np.flatnonzero(~rep.met).tolist()) == peer["missed_rows"]


PIN = ROOT / "tests" / "data" / "elasticflow_sample_outcomes.json"


def elasticflow_sample_outcomes() -> dict:
    """Our ElasticFlow on the shipped sample, per job (what ``PIN`` holds; remade by
    ``python -c "import tests.test_traces_peers as t; t.write_pin()"``, only when a change of outcomes is meant)."""
    from mara.traces.elasticflow import TraceElasticFlow

    _, rep = _replay(SHIPPED_SAMPLE, "n64g8", TraceElasticFlow())
    opt = lambda a: [None if np.isnan(v) else float(v) for v in a]  # noqa: E731
    return {
        "met": rep.met.astype(int).tolist(),
        "declined": rep.declined.astype(int).tolist(),
        "finish": opt(rep.finish),
        "started": opt(rep.started),
        "decisions": rep.n_decisions,
    }


def write_pin() -> None:
    PIN.write_text(json.dumps(elasticflow_sample_outcomes()) + "\n")


def test_elasticflow_outcomes_per_job_are_pinned_through_speed_work():
    """Speed-ups of the replay must not change any job's outcome, start or finish on the shipped sample."""
    pinned = json.loads(PIN.read_text())
    now = elasticflow_sample_outcomes()
    for key in ("met", "declined", "finish", "started", "decisions"):
        assert now[key] == pinned[key], key


def test_applying_a_plan_in_one_sweep_is_adding_it_then_merging():
    from mara.traces.profile import FreeProfile

    rng = np.random.default_rng(0)
    for _ in range(600):
        a, b = FreeProfile(100, 64), FreeProfile(100, 64)
        for _ in range(int(rng.integers(1, 8))):
            # non-decreasing starts (a repeated start is an empty segment), equal neighbours (one level held longer)
            size, repeat = int(rng.integers(1, 7)), bool(rng.integers(2))
            starts = np.sort(rng.choice(np.arange(60, 900, 30), size=size, replace=repeat)).tolist()
            gpus = rng.choice([0, 1, 2, 4, 8], size=len(starts)).tolist()
            end = int(rng.choice([starts[-1] + 30, 2000, starts[0]]))
            sign = int(rng.choice([-1, 1]))
            a.add_plan(starts, gpus, end, sign)
            a.merge()
            b.apply_plan(starts, gpus, end, sign)
            assert (a.times, a.free) == (b.times, b.free)


@pytest.mark.parametrize("sched", [TraceGandiva, TraceTiresias, TraceThemis], ids=lambda c: c.__name__)
def test_a_rigid_job_with_no_measured_speed_at_its_size_is_declined_and_the_replay_ends(tmp_path, sched):
    # deepspeech2 at batch 32 has no measurement on 64 GPUs: that job could never finish where it asks to run
    body = HEADER + "a,0,1000,deepspeech2,100000,32,64,100\nb,0,1000,deepspeech2,100000,32,8,100\n"
    p = tmp_path / "t.csv"
    p.write_text(body)
    _, rep = _replay(p, "n8g8", sched())
    assert rep.declined.tolist() == [True, False] and rep.met.tolist() == [False, True]
