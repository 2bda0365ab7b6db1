"""Job-trace replay: hand-worked tiny traces for EDF and ElasticFlow, the trace checks, windows, the one command."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest
from omegaconf import OmegaConf

from mara.allocators.rules import EDF
from mara.preflight.traces import check_trace_run
from mara.traces.elasticflow import TraceElasticFlow
from mara.traces.replay import JobState, replay
from mara.traces.schema import (
    SHIPPED_SAMPLE,
    TraceError,
    load_trace,
    make_windows,
    parse_cluster,
    window_jobs,
)
from mara.traces.settings import trace_run_settings
from mara.traces.throughput import job_speeds, known_models, load_table

ROOT = Path(__file__).resolve().parents[1]
HEADER = "job_id,submission_time,num_iteration,model_name,deadline,batch_size,num_gpu,duration\n"
R1, R2 = load_table()[("resnet50", 64)][:2]  # measured iters/s of resnet50 at batch 64 on 1 and 2 GPUs


def _write(tmp_path, body: str, name="t.csv") -> Path:
    p = tmp_path / name
    p.write_text(body)
    return p


def _replay(path, cluster, sched):
    cl = parse_cluster(cluster)
    tr = load_trace(path, cl, known_models=known_models())
    tput, ml = job_speeds(tr, sched.caps, cl.gpus)
    st = JobState(tr.submit, tr.deadline, tput, ml, tr.iterations.copy(), cl.gpus)
    return tr, replay(st, sched, np.zeros(tr.n_jobs, dtype=np.int64), 1)


def test_edf_serves_the_earlier_deadline_first_and_the_other_misses(tmp_path):
    # two GPUs; both jobs want both GPUs for ceil(1184 / R2) = 101 s. B (deadline 150) runs 0-101 and meets it;
    # A waits, runs 101-202 and misses its deadline 200.
    assert int(np.ceil(1184 / R2)) == 101
    p = _write(tmp_path, HEADER + "A,0,1184,resnet50,200,64,2,100\nB,0,1184,resnet50,150,64,2,100\n")
    tr, rep = _replay(p, "n1g2", EDF())
    out = dict(zip(tr.job_id, zip(rep.met, rep.finish, rep.started)))
    assert out["B"] == (True, 101.0, 0.0)
    assert out["A"] == (False, 202.0, 101.0)


def test_elasticflow_admits_a_feasible_arrival_and_grows_it_with_the_spare_gpu(tmp_path):
    # B alone at t=0: one GPU does 150 * R1 < 1184 iterations by its deadline, two do, so its share is 2 (finish 101).
    # A at t=200 (deadline 500): one GPU suffices (share 1), the spare GPU then goes to it: finish 200 + 101 = 301.
    p = _write(tmp_path, HEADER + "B,0,1184,resnet50,150,64,2,100\nA,200,1184,resnet50,500,64,2,100\n")
    assert 150 * R1 < 1184 <= 150 * R2 and 300 * R1 >= 1184
    tr, rep = _replay(p, "n1g2", TraceElasticFlow(overhead=False))
    out = dict(zip(tr.job_id, zip(rep.met, rep.finish, rep.declined)))
    assert out["B"] == (True, 101.0, False)
    assert out["A"] == (True, 301.0, False)


def test_elasticflow_declines_every_arrival_of_a_decision_when_one_cannot_be_saved(tmp_path):
    # A alone would meet its deadline; C (deadline 10 s after arrival, 10^6 iterations) cannot. They arrive in the
    # same decision, so both are declined (admission tests the whole set), and neither runs.
    p = _write(tmp_path, HEADER + "A,0,1184,resnet50,500,64,2,100\nC,0,1000000,resnet50,10,64,2,100\n")
    _, rep = _replay(p, "n1g2", TraceElasticFlow(overhead=False))
    assert rep.declined.all() and not rep.met.any() and np.isnan(rep.started).all()


def test_elasticflow_charges_setup_overhead_but_not_against_the_deadline(tmp_path):
    p = _write(tmp_path, HEADER + "B,0,1184,resnet50,150,64,2,100\n")
    _, rep = _replay(p, "n1g2", TraceElasticFlow(overhead=True))
    assert rep.met.all() and rep.finish[0] == 101.0  # the planned finish is tested; the end event came later


def test_raw_schema_jobs_are_rigid_work_with_a_deadline_factor(tmp_path):
    p = _write(tmp_path, "job_id,submission_time,duration,num_gpu\nx,10,100,4\ny,0,50,1\n")
    tr = load_trace(p, parse_cluster("n1g8"), deadline_factor=2.0)
    assert tr.schema == "raw" and list(tr.job_id) == ["y", "x"]
    assert list(tr.deadline) == [100, 210]
    tput, ml = job_speeds(tr, "table", 8)
    assert tput[1, 2] == pytest.approx(1.0) and ml[1] == 2  # 4 GPUs: one unit of work per second, at most 4 GPUs


@pytest.mark.parametrize(
    "body,needle",
    [
        ("", "empty file"),
        (HEADER, "no jobs"),
        ("job_id,submission_time,num_gpu\na,0,1\n", "missing column(s) duration"),
        (HEADER + "a,0,100,resnet50,500,64,1,-5\n", "column duration: must be a non-negative integer"),
        (HEADER + "a,0,100,resnet50,500,64,1,abc\n", "column duration: not a number"),
        (HEADER + "a,0,100,resnet50,500,64,16,100\n", "more than cluster n1g8 has (8)"),
        (HEADER + "a,0,100,alexnet,500,64,1,100\n", "no throughput table for model_name='alexnet'"),
    ],
)
def test_malformed_traces_are_one_line_errors(tmp_path, body, needle):
    p = _write(tmp_path, body)
    with pytest.raises(TraceError, match=None) as exc:
        load_trace(p, parse_cluster("n1g8"), known_models=known_models())
    assert needle in str(exc.value) and "\n" not in str(exc.value)


def _cfg(**trace):
    return {"methods": ["EDF", "ElasticFlow"], "trace": trace}


def test_windows_never_overlap_and_validation_comes_first():
    tr = load_trace(SHIPPED_SAMPLE)
    ws = make_windows(tr, 86400, 3600, count=3, val_count=2, first_jobs=None)
    spans = sorted((w.start - w.warmup, w.start + w.length, w.split) for w in ws)
    assert [s[2] for s in spans] == ["val", "val", "eval", "eval", "eval"]
    assert all(a[1] <= b[0] for a, b in zip(spans, spans[1:]))
    jobs, scored = window_jobs(tr, ws[2], None)
    assert (jobs.submit[scored] >= ws[2].start).all() and (jobs.submit[~scored] < ws[2].start).all()


def test_a_method_without_a_trace_scheduler_is_refused_before_any_work():
    cfg = _cfg(cluster="n64g8")
    cfg["methods"] = ["EDF", "LARA"]
    with pytest.raises(Exception, match="does not schedule job traces"):
        check_trace_run(trace_run_settings(cfg))
    with pytest.raises(Exception, match="n<nodes>g<gpus>"):
        check_trace_run(trace_run_settings(_cfg(cluster="64x8")))


def test_a_trace_only_method_is_refused_outside_the_trace_experiment():
    from mara.evaluate import _before_any_work

    with pytest.raises(Exception, match="schedules job traces only: run it with experiment=trace"):
        _before_any_work(OmegaConf.create({"methods": ["FIFO", "ElasticFlow"]}))


def _run(args, tmp_path):
    env = dict(os.environ, PYTHONPATH=str(ROOT))
    return subprocess.run(
        [sys.executable, "-m", "mara.evaluate", "experiment=trace", f"paths.output_dir={tmp_path / 'run'}", *args],
        check=False,
        capture_output=True,
        text=True,
        cwd=ROOT,
        env=env,
        timeout=600,
    )


def test_the_command_refuses_a_trace_asking_more_gpus_than_the_cluster(tmp_path):
    p = _write(tmp_path, HEADER + "a,0,100,resnet50,500,64,64,100\n")
    r = _run([f"trace.path={p}", "trace.cluster=n2g8"], tmp_path)
    assert r.returncode == 2, r.stderr
    assert len(r.stderr.strip().splitlines()) == 1 and "more than cluster n2g8 has (16)" in r.stderr
    assert not (tmp_path / "run" / "results.json").exists()


def test_the_command_writes_one_row_per_method_window_job(tmp_path):
    r = _run(["trace.first_jobs=40", "'methods=[EDF,ElasticFlow]'".strip("'")], tmp_path)
    assert r.returncode == 0, r.stderr[-2000:]
    res = json.loads((tmp_path / "run" / "results.json").read_text())
    assert len(res["rows"]) == 80 and {row["deadline_met"] for row in res["rows"]} <= {0, 1}
    md = (tmp_path / "run" / "results.md").read_text()
    assert "Deadline met by job size" in md and "Deadline met by model" in md and "occupancy.png" in md
    assert (tmp_path / "run" / "occupancy.png").exists()
