"""Target-loss trace jobs: hand-worked crossings and quantiles, the stretch, what a declared-count scheduler sees,
ElasticFlow on declared counts against the true ones, and the setting's one-line refusals."""

from __future__ import annotations

import json
import math
import os
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest

from mara.curves.bank import default_bank_path, load_bank
from mara.traces.elasticflow import TraceElasticFlow
from mara.traces.replay import JobState, replay
from mara.traces.schema import SHIPPED_SAMPLE, load_trace
from mara.traces.target_loss import (
    JOB_SPLIT,
    PAST_SPLIT,
    TargetLossJobs,
    crossing_positions,
    declared_batches,
    quantile_count,
    stretched_loss,
    target_loss_jobs,
)
from mara.traces.target_run import DeclaredCount, PredictedCount
from mara.traces.throughput import LEVELS

ROOT = Path(__file__).resolve().parents[1]


@pytest.fixture(scope="module")
def bank():
    return load_bank(default_bank_path())


def test_crossing_is_interpolated_between_batches():
    L = np.array([[3.0, 2.0, 1.0, 0.5], [3.0, 2.0, 1.0, np.nan]])
    # row 0 reaches 1.5 halfway between batch 2 (loss 2) and batch 3 (loss 1): position 2.5
    assert crossing_positions(L, 1.5).tolist() == [2.5, 2.5]
    assert crossing_positions(L, 3.0).tolist() == [1.0, 1.0]  # already there at the first batch
    assert crossing_positions(L, np.array([0.5, 0.5])).tolist() == [4.0, math.inf]  # NaN padding never reaches it


def test_the_declared_quantile_is_the_count_by_which_ninety_percent_have_arrived():
    rng = np.random.default_rng(0)
    assert quantile_count(rng.permutation(np.arange(1.0, 11.0))) == 9.0  # 9 of 10 runs by 9
    assert quantile_count(np.arange(1.0, 51.0)) == 45.0  # 45 of 50 by 45
    assert quantile_count(np.r_[np.arange(1.0, 10.0), np.inf]) == 9.0
    assert quantile_count(np.r_[np.arange(1.0, 9.0), np.inf, np.inf]) == math.inf


def test_stretching_puts_the_crossing_on_the_true_count():
    L = np.array([3.0, 2.0, 1.0, 0.5])
    k = np.arange(1, 1001)
    loss = stretched_loss(L, 2.5, 1000, k)  # batch position 2.5 (loss 1.5) falls on iteration 1000
    assert loss[-1] == 1.5 and (loss[:-1] > 1.5).all()
    assert stretched_loss(L, 2.5, 1000, 500) == pytest.approx(2.75)  # position 1.25


def test_every_sample_job_first_reaches_its_target_at_its_num_iteration(bank):
    tr = load_trace(SHIPPED_SAMPLE)
    tl = target_loss_jobs(tr.job_id, tr.model, tr.iterations, bank, seed=0)
    assert (tl.true == tr.iterations).all()
    assert set(bank.split[tl.row]) == {JOB_SPLIT}
    for j in range(tr.n_jobs):
        n = int(tl.true[j])
        k = np.arange(1, n + 1) if n <= 60_000 else np.r_[np.linspace(1, n - 1, 50_000).astype(int), n - 1, n]
        loss = tl.loss(bank, j, k)
        assert loss[-1] <= tl.target[j] and (loss[:-1] > tl.target[j]).all(), j


def test_declared_count_is_the_past_runs_ninety_percent_count_scaled_to_the_job(bank):
    tr = load_trace(SHIPPED_SAMPLE).take(slice(0, 30))
    tl = target_loss_jobs(tr.job_id, tr.model, tr.iterations, bank, seed=0)
    for j in range(tr.n_jobs):
        rows = bank.rows(tl.family[j], PAST_SPLIT)
        # brute force: each past run's interpolated crossing, the 9-in-10 count by sorting
        xs = []
        for r in rows:
            L = bank.L[r][~np.isnan(bank.L[r])]
            i = next((i for i, v in enumerate(L) if v <= tl.target[j]), None)
            xs.append(math.inf if i is None else 1.0 if i == 0 else i + (L[i - 1] - tl.target[j]) / (L[i - 1] - L[i]))
        q = sorted(xs)[math.ceil(0.9 * len(xs)) - 1]
        assert tl.declared[j] == math.ceil(tl.true[j] / tl.x_star[j] * q)


def test_a_lower_declared_share_declares_less_on_the_same_jobs(bank):
    tr = load_trace(SHIPPED_SAMPLE).take(slice(0, 30))
    hi = target_loss_jobs(tr.job_id, tr.model, tr.iterations, bank, seed=0, q=0.9)
    lo = target_loss_jobs(tr.job_id, tr.model, tr.iterations, bank, seed=0, q=0.5)
    assert (lo.row == hi.row).all() and (lo.target == hi.target).all()  # the jobs do not depend on what users declare
    assert (lo.declared <= hi.declared).all() and (lo.declared < hi.declared).any()


def test_the_true_count_is_not_in_anything_a_declared_count_scheduler_sees_but_the_loss_prefix(bank):
    # two jobs of one model with one target, one scale of iterations per batch, hence one declared count, that draw
    # two pool curves reaching the target at different batches: their true counts differ, nothing else does.
    fam, eps, scale = "CNN_Cifar10", 1.8, 40.0
    pool = bank.rows(fam, JOB_SPLIT)
    x = crossing_positions(bank.L[pool], eps)
    a, b = np.argsort(np.where(np.isfinite(x), x, np.inf))[[2, 20]]
    true = np.array([scale * x[a], scale * x[b]])
    declared = np.full(2, math.ceil(scale * declared_batches(bank, fam, eps)))
    assert true[1] > true[0] + 100 and (declared > true).all()
    seen = []
    for n in true:
        tput = np.zeros((1, len(LEVELS)))
        tput[0, :4] = [1.0, 1.9, 3.6, 6.5]
        st = JobState(np.array([0]), np.array([10**6]), tput, np.array([3]), np.array([n]), 8)
        sched = DeclaredCount(TraceElasticFlow(overhead=False), declared)
        sched.start(st)
        st.status[0] = 0
        sched.decide(0, np.array([0]))
        view = sched.view
        seen.append(
            (
                view.iter_left.tolist(),
                view.submit.tolist(),
                view.ddl.tolist(),
                view.tput.tolist(),
                st.gpus.tolist(),
                st.finish.tolist(),
                st.status.tolist(),
            )
        )
    assert seen[0] == seen[1]
    k = np.arange(1, int(true[0]))
    la = stretched_loss(bank.L[pool[a]], x[a], true[0], k)
    lb = stretched_loss(bank.L[pool[b]], x[b], true[1], k)
    assert not np.allclose(la, lb)  # the loss prefix is where the two jobs differ


def _one_gpu_state(true, ddl):
    J = len(true)
    tput = np.zeros((J, len(LEVELS)))
    tput[:, 0] = 1.0  # one iteration per second on one GPU, the only level
    return JobState(
        np.zeros(J, dtype=np.int64),
        np.asarray(ddl, dtype=np.int64),
        tput,
        np.zeros(J, dtype=np.int64),
        np.asarray(true, dtype=np.float64),
        1,
    )


def test_elasticflow_on_declared_counts_declines_what_the_true_count_admits():
    # one GPU, 1 it/s; true 600 iterations, deadline 1000. Told 600, ElasticFlow admits and finishes at 600; told the
    # declared 1200 it cannot plan them by 1000 and declines a job that would have met its deadline.
    rep = replay(_one_gpu_state([600], [1000]), TraceElasticFlow(overhead=False), np.zeros(1, dtype=np.int64), 1)
    assert rep.met.tolist() == [True] and rep.finish.tolist() == [600.0]
    sched = DeclaredCount(TraceElasticFlow(overhead=False), np.array([1200.0]))
    rep = replay(_one_gpu_state([600], [1000]), sched, np.zeros(1, dtype=np.int64), 1)
    assert rep.declined.tolist() == [True] and rep.met.tolist() == [False]


def test_a_job_stops_at_its_target_before_its_declared_count_and_its_gpu_is_free_at_once():
    # A (true 600, declared 1200, deadline 2000) runs alone and reaches its target at 600: an event, so B (arrives
    # at 10 and waits: ElasticFlow has planned A to 1200) starts at 600 and its 300 iterations end at 900.
    st = _one_gpu_state([600, 300], [2000, 3000])
    st.submit[1] = 10
    sched = DeclaredCount(TraceElasticFlow(overhead=False), np.array([1200.0, 300.0]))
    rep = replay(st, sched, np.zeros(2, dtype=np.int64), 1)
    assert rep.met.tolist() == [True, True]
    assert rep.finish.tolist() == [600.0, 900.0] and rep.started.tolist() == [0.0, 600.0]


class _ShortSighted:
    """A predictor that always says one batch is left."""

    min_obs = 4

    def predict_quantiles(self, S, L, lengths, eps, cap, batch_size, lr, family=None):
        return np.ones((len(lengths), 3))


@pytest.mark.parametrize("deadline, met", [(2000, True), (500, False)])
def test_an_estimate_that_runs_short_is_replanned_never_a_success(bank, deadline, met):
    # one GPU, 1 it/s, true 600 iterations, 10 iterations per bank batch; the prior says 100 iterations, then the
    # predictor says 10 more at every look. ElasticFlow's plans end early again and again; the job still ends when
    # it reaches its target, at 600, and meets a deadline of 2000, not one of 500.
    row = bank.rows("CNN_Cifar10", JOB_SPLIT)[0]
    tl = TargetLossJobs(
        family=np.array(["CNN_Cifar10"]),
        row=np.array([row]),
        target=np.array([1.8]),
        x_star=np.array([60.0]),
        scale=np.array([10.0]),
        true=np.array([600.0]),
        declared=np.array([1000.0]),
        past_batches=np.array([100.0]),
    )
    sched = PredictedCount(TraceElasticFlow(overhead=False), tl, bank, _ShortSighted(), 1, np.array([100.0]))
    rep = replay(_one_gpu_state([600], [deadline]), sched, np.zeros(1, dtype=np.int64), 1)
    assert rep.finish.tolist() == [600.0] and rep.met.tolist() == [met]


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


@pytest.mark.parametrize(
    "args, needle",
    [
        (["trace.jobs=targets"], "trace.jobs must be one of iterations, target_loss"),
        (["trace.jobs=target_loss", "trace.target_seed=-1"], "trace.target_seed must be an integer in [0, 2^62]"),
        (
            ["trace.jobs=target_loss", "trace.declare_quantile=1.5"],
            "trace.declare_quantile must be a finite number in (0, 1]",
        ),
        (
            [
                "trace.jobs=target_loss",
                "methods=[ElasticFlow-predicted]",
                "+method_overrides.ElasticFlow-predicted.trace_band=mid",
            ],
            "trace_band must be one of lo, median, hi",
        ),
        (
            ["trace.jobs=target_loss", "trace.path=mara/data/traces/itp_cluster01_first300_raw.csv"],
            "needs the elasticflow schema",
        ),
    ],
)
def test_bad_target_loss_settings_are_refused_in_one_line(tmp_path, args, needle):
    r = _run(args, tmp_path)
    assert r.returncode == 2, r.stderr[-2000:]
    assert len(r.stderr.strip().splitlines()) == 1 and needle in r.stderr
    assert not (tmp_path / "run" / "results.json").exists()


def test_the_command_runs_target_loss_jobs_with_each_jobs_counts(tmp_path):
    r = _run(["trace.jobs=target_loss", "trace.first_jobs=30", "methods=[EDF,ElasticFlow,ElasticFlow-true]"], tmp_path)
    assert r.returncode == 0, r.stderr[-2000:]
    res = json.loads((tmp_path / "run" / "results.json").read_text())
    rows = res["rows"]
    assert len(rows) == 90 and {row["deadline_met"] for row in rows} <= {0, 1}
    short = [
        row for row in rows if row["method"] == "ElasticFlow" and row["declared_iterations"] < row["true_iterations"]
    ]
    assert all(row["deadline_met"] == 0 for row in short)
