"""The least-slack rule on multi-GPU elastic trace jobs: hand-worked slack, minimum shares, soft deferral, extra GPUs
by marginal throughput, and the rule as a trace scheduler on the truth and on a predictor's estimates."""

from __future__ import annotations

import numpy as np
import pytest

from mara.allocators.slack import SlackRule
from mara.sched.slack import (
    DEFERRED,
    FINISHABLE,
    TraceView,
    min_share,
    slack_allocation,
    slack_of,
    slack_order,
)
from mara.traces.replay import JobState, replay
from mara.traces.throughput import LEVELS


def _tput(*rows):
    """[n, L] throughputs from per-job lists over the first levels (1, 2, 4, ...)."""
    out = np.zeros((len(rows), len(LEVELS)))
    for i, r in enumerate(rows):
        out[i, : len(r)] = r
    return out


def test_slack_is_time_to_deadline_less_the_time_at_the_fastest_level():
    v = TraceView(
        now=100.0,
        remaining=np.array([400.0, 400.0]),
        deadline=np.array([600.0, 300.0]),
        tput=_tput([1.0, 2.0, 4.0], [1.0, 2.0]),
        n_gpus=8,
    )
    # job 0: 500 s left, 100 s at 4 it/s -> 400; job 1: 200 s left, 200 s at 2 it/s -> 0
    assert slack_of(v).tolist() == [400.0, 0.0]
    # the smallest level that finishes by the deadline: 400 it in 500 s needs 1 it/s (1 GPU); 400 in 200 needs 2 GPUs
    assert min_share(v).tolist() == [1, 2]


def test_levels_above_the_pool_do_not_count():
    v = TraceView(
        now=0.0, remaining=np.array([800.0]), deadline=np.array([300.0]), tput=_tput([1.0, 2.0, 4.0]), n_gpus=2
    )
    assert slack_of(v).tolist() == [-100.0] and min_share(v).tolist() == [0]  # 4 GPUs would do it; the pool has 2


def test_least_slack_first_then_deferred_jobs_by_deadline():
    v = TraceView(
        now=0.0,
        remaining=np.array([100.0, 100.0, 1000.0, 1000.0]),
        deadline=np.array([500.0, 200.0, 300.0, 200.0]),
        tput=_tput([1.0], [1.0], [1.0], [1.0]),
        n_gpus=4,
    )
    stage, order = slack_order(v)
    assert stage.tolist() == [FINISHABLE, FINISHABLE, DEFERRED, DEFERRED]
    assert order.tolist() == [1, 0, 3, 2]
    # a margin of half the time left defers job 1 (slack 100 of 200 s is fine at 0.5; 0.6 is not)
    assert slack_order(v, 0.5)[0].tolist() == [0, 0, 1, 1]
    assert slack_order(v, 0.6)[0].tolist() == [0, 1, 1, 1]


def test_minimum_shares_go_by_least_slack_and_a_deferred_job_gets_only_what_is_left():
    # 4 GPUs. A needs 2 GPUs (400 it in 200 s), B needs 2 (400 it in 250 s at 1.9 it/s), C is hopeless.
    # A (least slack) and B take their 2 each; C, deferred, gets nothing: no GPU is left.
    tp = _tput([1.0, 2.0, 3.5], [1.0, 1.9, 3.5], [1.0, 2.0, 3.5])
    v = TraceView(
        now=0.0, remaining=np.array([400.0, 400.0, 5000.0]), deadline=np.array([200.0, 250.0, 100.0]), tput=tp, n_gpus=4
    )
    assert slack_allocation(v).tolist() == [2, 2, 0]
    # with 7 GPUs: minimum shares 2 + 2, then extra steps by marginal progress rate: both finishable jobs have one
    # step (2 -> 4 GPUs) left: A's rate grows (3.5 - 2) / 400 / 2, B's (3.5 - 1.9) / 400 / 2, so B first; that
    # leaves 1 GPU, too few for A's step, and C (deferred) takes it.
    v7 = TraceView(now=0.0, remaining=v.remaining, deadline=v.deadline, tput=tp, n_gpus=7)
    assert slack_allocation(v7).tolist() == [2, 4, 1]


def test_a_finishable_job_that_does_not_fit_waits_and_a_smaller_one_backfills():
    # 4 GPUs: A needs 8 (above the pool: deferred), B needs 2 (slack 125 s), C needs 1 (slack 100 s): minimum
    # shares 1 + 2, then marginal steps.
    tp = _tput([1.0, 2.0, 4.0, 8.0], [1.0, 2.0, 4.0], [1.0, 2.0])
    v = TraceView(
        now=0.0, remaining=np.array([800.0, 300.0, 100.0]), deadline=np.array([100.0, 200.0, 150.0]), tput=tp, n_gpus=4
    )
    stage, _ = slack_order(v)
    assert stage.tolist() == [DEFERRED, FINISHABLE, FINISHABLE]
    g = slack_allocation(v)
    assert g[1] >= 2 and g[2] >= 1 and g.sum() <= 4
    # the one GPU left: B's step 2 -> 4 needs 2, C's 1 -> 2 needs 1 and is the only one that fits
    assert g.tolist() == [0, 2, 2]


def test_every_arrival_is_admitted_and_a_deferred_job_runs_when_gpus_free():
    # one GPU, 1 it/s. A (600 it, deadline 1000) runs; B (arrives at 0, 900 it, deadline 800) can never make it:
    # deferred, not declined, and it runs once A is done (ends at 600 + 900 = 1500, late).
    tput = np.zeros((2, len(LEVELS)))
    tput[:, 0] = 1.0
    st = JobState(
        np.zeros(2, dtype=np.int64),
        np.array([1000, 800]),
        tput,
        np.zeros(2, dtype=np.int64),
        np.array([600.0, 900.0]),
        1,
    )
    rep = replay(st, SlackRule(overhead=False), np.zeros(2, dtype=np.int64), 1)
    assert rep.declined.tolist() == [False, False]
    assert rep.met.tolist() == [True, False] and rep.finish.tolist() == [600.0, 1500.0]


def test_a_deferred_job_is_judged_again_when_its_slack_returns():
    # one GPU. A (deadline 700, 600 it) and B (deadline 650, 600 it) arrive together: both finishable alone; B has
    # less slack, runs first and meets 650; A is then hopeless (it needs 600 s from 600) and finishes late at 1200.
    tput = np.zeros((2, len(LEVELS)))
    tput[:, 0] = 1.0
    st = JobState(
        np.zeros(2, dtype=np.int64),
        np.array([700, 650]),
        tput,
        np.zeros(2, dtype=np.int64),
        np.array([600.0, 600.0]),
        1,
    )
    rep = replay(st, SlackRule(overhead=False), np.zeros(2, dtype=np.int64), 1)
    assert rep.met.tolist() == [False, True] and rep.finish.tolist() == [1200.0, 600.0]


def test_set_up_overhead_is_charged_as_elasticflow_charges_it():
    # one GPU, 1 it/s, 100 it: started at 0 with base 2 s + 2 (log2 1 + 1) = 4 s of first set-up: finish at 104
    tput = np.zeros((1, len(LEVELS)))
    tput[0, 0] = 1.0
    st = JobState(
        np.zeros(1, dtype=np.int64), np.array([1000]), tput, np.zeros(1, dtype=np.int64), np.array([100.0]), 1
    )
    rep = replay(st, SlackRule(), np.zeros(1, dtype=np.int64), 1)
    assert rep.finish.tolist() == [104.0] and rep.met.tolist() == [True]


@pytest.mark.parametrize("kw", [{"margin": -0.1}, {"margin": 1.0}, {"caps": "all"}])
def test_bad_settings_are_refused(kw):
    with pytest.raises(ValueError):
        SlackRule(**kw)


class _Counting:
    """A predictor that says 50 batches are left and counts how often it is asked."""

    min_obs = 4

    def __init__(self):
        self.calls = 0

    def predict_quantiles(self, S, L, lengths, eps, cap, batch_size, lr, family=None):
        self.calls += 1
        return np.full((len(lengths), 3), 50.0)


def _predicted(every_s, bank):
    from mara.traces.target_loss import JOB_SPLIT, TargetLossJobs
    from mara.traces.target_run import PredictedCount

    row = bank.rows("CNN_Cifar10", JOB_SPLIT)[0]
    tl = TargetLossJobs(
        family=np.array(["CNN_Cifar10"] * 2),
        row=np.array([row, row]),
        target=np.array([1.8, 1.8]),
        x_star=np.array([60.0, 60.0]),
        scale=np.array([10.0, 10.0]),
        true=np.array([600.0, 600.0]),
        declared=np.array([1000.0, 1000.0]),
        past_batches=np.array([100.0, 100.0]),
    )
    pred = _Counting()
    return PredictedCount(SlackRule(overhead=False), tl, bank, pred, 1, np.array([700.0, 700.0]), every_s), pred


def test_the_predictor_is_asked_at_most_once_per_period_and_estimates_run_down_between():
    from mara.curves.bank import default_bank_path, load_bank

    bank = load_bank(default_bank_path())
    # two GPUs, 1 it/s each job, 600 iterations each, a second job arriving every 100 s keeps decisions coming
    tput = np.zeros((2, len(LEVELS)))
    tput[:, 0] = 1.0

    def state():
        return JobState(
            np.array([0, 100]), np.array([5000, 5000]), tput, np.zeros(2, dtype=np.int64), np.array([600.0, 600.0]), 2
        )

    every, p_every = _predicted(0.0, bank)
    rep0 = replay(state(), every, np.zeros(2, dtype=np.int64), 1)
    hourly, p_hourly = _predicted(3600.0, bank)
    rep1 = replay(state(), hourly, np.zeros(2, dtype=np.int64), 1)
    assert rep0.met.tolist() == rep1.met.tolist() == [True, True]  # the simulator, not the estimate, ends a job
    # asked first at 100 s (job 0 has 10 batches of loss, job 1 none yet), then not again within the hour
    assert p_hourly.calls == 1 < p_every.calls and hourly.last == {0: (10, 50.0)}
    # job 0 after 500 iterations (50 batches of 10): its estimate of 50 batches at 10 has run down by 40 batches
    est = hourly._estimates(np.array([0]), np.array([500.0]), ask=False)
    assert est.tolist() == [100.0]


def test_the_capacity_bound_counts_what_gpu_time_allows_and_no_more():
    from mara.bounds.trace_capacity import capacity_bound, gpu_seconds_needed

    # two GPUs; per GPU 1 it/s at one GPU, 0.8 it/s at two (1.6 it/s): a job's least GPU-time is its count at 1 it/s
    tput = _tput([1.0, 1.6], [1.0, 1.6], [1.0, 1.6], [1.0])
    work = np.array([100.0, 100.0, 100.0, 500.0])
    gs, ws = gpu_seconds_needed(work, tput, 2)
    assert gs.tolist() == [100.0, 100.0, 100.0, 500.0] and ws.tolist() == [62.5, 62.5, 62.5, 500.0]
    # jobs 0-2 share [0, 100]: 200 GPU-seconds hold two of them; job 3 cannot finish 500 s of work in its 400 s
    ub, pick = capacity_bound([0, 0, 0, 0], [100, 100, 100, 400], gs, ws, 2, time_limit_s=10)
    assert ub == 2.0 and pick[:3].sum() == 2 and pick[3] == 0


def test_a_rule_planning_on_estimates_is_refused_on_iteration_count_jobs(tmp_path):
    import os
    import subprocess
    import sys
    from pathlib import Path

    root = Path(__file__).resolve().parents[1]
    r = subprocess.run(
        [
            sys.executable,
            "-m",
            "mara.evaluate",
            "experiment=trace",
            "methods=[EDF,Slack-QR-q]",
            f"paths.output_dir={tmp_path / 'run'}",
        ],
        capture_output=True,
        text=True,
        cwd=root,
        env=dict(os.environ, PYTHONPATH=str(root)),
        timeout=600,
    )
    assert r.returncode == 2 and len(r.stderr.strip().splitlines()) == 1, r.stderr[-2000:]
    assert "trace.jobs=target_loss" in r.stderr and not (tmp_path / "run" / "results.json").exists()


def _grow_by_scan(gpus, free, who, tp, rem):
    """The extra-GPU loop written plainly: every step scans every job of ``who`` for the largest gain per added GPU."""
    while free > 0 and who.size:
        best, best_val, best_lv = -1, 0.0, 0
        for j in who:
            g = int(gpus[j])
            up = [int(lv) for lv, sp in zip(LEVELS, tp[j]) if lv > g and sp > 0]
            if not up or up[0] - g > free:
                continue
            k, i = int(LEVELS.searchsorted(g)), int(LEVELS.searchsorted(up[0]))
            val = (tp[j, i] - tp[j, k]) / max(rem[j], 1e-9) / (up[0] - g)
            if val > best_val:
                best, best_val, best_lv = int(j), val, up[0]
        if best < 0:
            break
        free -= best_lv - int(gpus[best])
        gpus[best] = best_lv
    return free


def test_extra_gpus_by_heap_equal_the_plain_scan():
    """The heap that hands out extra GPUs gives every job the GPUs the plain every-job scan gives, ties included
    (equal throughput rows, so equal gains, must go to the earliest job)."""
    from mara.sched.slack import _grow

    rng = np.random.default_rng(0)
    for trial in range(300):
        n = int(rng.integers(1, 40))
        base = np.sort(rng.uniform(0.5, 5.0, size=(4, len(LEVELS))), axis=1)  # a few rows, so ties happen
        tp = base[rng.integers(0, 4, size=n)] * (rng.random((n, len(LEVELS))) > 0.2)
        tp[:, 0] = np.maximum(tp[:, 0], 0.5)  # every job may run on one GPU
        rem = rng.choice([1.0, 10.0, 1e4, 0.0], size=n)
        gpus = np.where(rng.random(n) < 0.7, 1, 0).astype(np.int64)
        who = rng.permutation(np.flatnonzero(gpus > 0))
        free = int(rng.integers(0, 200))
        a, b = gpus.copy(), gpus.copy()
        assert _grow(a, free, who, tp, rem) == _grow_by_scan(b, free, who, tp, rem), trial
        np.testing.assert_array_equal(a, b, err_msg=str(trial))
