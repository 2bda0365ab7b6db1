"""Why ElasticFlow-predicted declines arrivals: it replays ElasticFlow-predicted (n64g8, seed 0, prior 0.5) and
counts the arrivals it declines at decisions where a live job's plan on its estimate already misses its deadline
(ElasticFlow declines every arrival of such a decision). The breakdown of a finished run is
``python -m mara.report target-loss-breakdown``.

    python scripts/experiments/target_loss_blocked.py <trace csv> <first jobs> <band: lo|median|hi>
"""

from __future__ import annotations

import sys

import numpy as np

from mara.traces.elasticflow import TraceElasticFlow
from mara.traces.replay import JobState
from mara.traces.schema import load_trace
from mara.traces.throughput import job_speeds


def blocked(csv: str, first_jobs: int, band: str) -> None:
    from mara.curves.bank import default_bank_path, load_bank
    from mara.predictors.factory import predictor_from
    from mara.traces.replay import DECLINED, PENDING, RUNNING, replay
    from mara.traces.target_loss import declared_batches, target_loss_jobs
    from mara.traces.target_run import BANDS, PredictedCount

    bank, tr = load_bank(default_bank_path()), load_trace(csv).take(slice(0, first_jobs))
    tl = target_loss_jobs(tr.job_id, tr.model, tr.iterations, bank, 0)
    prior = np.ceil(tl.seen_scale * np.array([declared_batches(bank, f, e, 0.5) for f, e in zip(tl.family, tl.target)]))
    inner = TraceElasticFlow()
    sched = PredictedCount(inner, tl, bank, predictor_from("qr", bank.path), BANDS[band], prior)
    tput, ml = job_speeds(tr, inner.caps, 512)
    st = JobState(tr.submit, tr.deadline, tput, ml, tr.iterations.astype(float).copy(), 512)
    decide, n = sched.decide, {"declined": 0, "behind a late live job": 0}

    def counted(now, arr):
        live = np.flatnonzero((st.status == PENDING) | (st.status == RUNNING))
        late = False
        if len(arr) and live.size:
            sched.view.iter_left[live] = sched._estimates(live, sched.work[live] - st.iter_left[live])
            late = not inner.plan_all(live, now)[2]
        out = decide(now, arr)
        if len(arr) and (st.status[arr] == DECLINED).all():
            n["declined"] += len(arr)
            n["behind a late live job"] += len(arr) if late else 0
        return out

    sched.decide = counted
    rep = replay(st, sched, np.zeros(tr.n_jobs, dtype=np.int64), 1)
    print(f"{csv} first {first_jobs}, band {band}: met {rep.met.mean():.3f}, declined {rep.declined.mean():.3f}; {n}")


if __name__ == "__main__":
    if len(sys.argv) != 4:
        sys.exit("usage: python scripts/experiments/target_loss_blocked.py <trace csv> <first jobs> <band>")
    blocked(sys.argv[1], int(sys.argv[2]), sys.argv[3])
