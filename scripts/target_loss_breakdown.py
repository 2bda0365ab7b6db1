"""Why ElasticFlow on declared counts misses, from a target-loss run that has ElasticFlow and ElasticFlow-true.

    python scripts/target_loss_breakdown.py <run folder> <trace csv> [<run folder> <trace csv> ...]
    python scripts/target_loss_breakdown.py --blocked <trace csv> <first jobs> <band: lo|median|hi>

Prints, over the run's jobs (first ``trace.first_jobs`` of the trace; the run must use trace.first_jobs): each
method's deadline-met ratio, the declared/true count ratio, the share of jobs whose declared count cannot meet the
deadline even alone on the empty cluster (ElasticFlow's own minimum plan), the share declined, and the paired
counts of jobs met by one ElasticFlow and not the other. ``--blocked`` replays ElasticFlow-predicted (n64g8, seed 0,
prior 0.5) and counts the arrivals it declines at decisions where a live job's plan on its estimate already misses
its deadline (ElasticFlow declines every arrival of such a decision).
"""

from __future__ import annotations

import json
import sys

import numpy as np

from mara.traces.elasticflow import TraceElasticFlow
from mara.traces.profile import FreeProfile
from mara.traces.replay import JobState
from mara.traces.schema import load_trace, parse_cluster
from mara.traces.throughput import job_speeds


def breakdown(run: str, csv: str) -> None:
    with open(f"{run}/results.json") as fh:
        res = json.load(fh)
    proto = res["protocol"]
    gpus = parse_cluster(proto["cluster"]).gpus
    by: dict = {}
    for r in res["rows"]:
        by.setdefault(r["method"], {})[r["job_id"]] = r
    tr = load_trace(csv).take(slice(0, int(proto["first_jobs"])))
    ids = [str(i) for i in tr.job_id]
    ef = by["ElasticFlow"]
    decl = np.array([ef[i]["declared_iterations"] for i in ids])
    true = np.array([ef[i]["true_iterations"] for i in ids])
    tput, ml = job_speeds(tr, TraceElasticFlow.caps, gpus)
    alone = TraceElasticFlow()
    alone.start(JobState(tr.submit, tr.deadline, tput, ml, decl.copy(), gpus))
    bad = np.array(
        [
            not alone.min_plan(j, FreeProfile(int(t), gpus), int(t), int(t), float(decl[j]))[4]
            for j, t in enumerate(tr.submit)
        ]
    )
    declined = np.array([ef[i]["declined"] for i in ids], bool)
    met = {m: np.array([by[m][i]["deadline_met"] for i in ids]) for m in by}
    print(run, {m: round(float(v.mean()), 3) for m, v in met.items()})
    fam = np.array([ef[i]["family"] for i in ids])
    ratio = decl / true
    print(
        "  declared/true at 10/25/50/75/90 %: "
        + " / ".join(f"{v:.2f}" for v in np.percentile(ratio, [10, 25, 50, 75, 90]))
        + "; median by family: "
        + ", ".join(f"{f} {np.median(ratio[fam == f]):.2f}" for f in sorted(set(fam)))
    )
    print(
        f"  declared/true median {np.median(decl / true):.2f}; declared short {np.mean(decl < true):.3f}; "
        f"infeasible alone on the declared count {bad.mean():.3f}; declined {declined.mean():.3f} "
        f"(of them infeasible alone {bad[declined].mean():.3f})"
    )
    if "ElasticFlow-true" in met:
        a, b = met["ElasticFlow-true"], met["ElasticFlow"]
        print(
            f"  met by ElasticFlow-true, not ElasticFlow: {np.mean((a == 1) & (b == 0)):.3f}; "
            f"the reverse: {np.mean((a == 0) & (b == 1)):.3f}"
        )


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
    args = sys.argv[1:]
    if args[:1] == ["--blocked"] and len(args) == 4:
        blocked(args[1], int(args[2]), args[3])
        sys.exit(0)
    if not args or len(args) % 2:
        sys.exit("usage: python scripts/target_loss_breakdown.py <run folder> <trace csv> [...]")
    for run, csv in zip(args[::2], args[1::2]):
        breakdown(run, csv)
