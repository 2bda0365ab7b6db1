"""Why ElasticFlow on declared counts misses, from a target-loss trace run that has ElasticFlow (and
ElasticFlow-true): over the run's jobs (the first ``trace.first_jobs`` of the trace), each method's deadline-met
ratio, the declared/true count ratio (by model family), the share of jobs whose declared count cannot meet the
deadline even alone on the empty cluster (ElasticFlow's own minimum plan), the share declined, and the paired counts
of jobs met by one ElasticFlow and not the other.
"""

from __future__ import annotations

import numpy as np

from mara.traces.elasticflow import TraceElasticFlow
from mara.traces.profile import FreeProfile
from mara.traces.replay import JobState
from mara.traces.schema import load_trace, parse_cluster
from mara.traces.throughput import job_speeds


def breakdown(name: str, res: dict, csv: str) -> str:
    """The lines of one run (``res``: its results.json, named ``name``) on its trace file ``csv``."""
    proto = res["protocol"]
    if not proto.get("first_jobs"):
        raise ValueError(f"{name}: the breakdown reads a run of the first jobs of a trace (trace.first_jobs)")
    gpus = parse_cluster(proto["cluster"]).gpus
    by: dict = {}
    for r in res["rows"]:
        by.setdefault(r["method"], {})[r["job_id"]] = r
    if "ElasticFlow" not in by or "declared_iterations" not in next(iter(by["ElasticFlow"].values())):
        raise ValueError(f"{name}: no ElasticFlow rows of a target-loss run (trace.jobs=target_loss)")
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
    fam = np.array([ef[i]["family"] for i in ids])
    ratio = decl / true
    out = [
        f"{name} { ({m: round(float(v.mean()), 3) for m, v in met.items()}) }",
        "  declared/true at 10/25/50/75/90 %: "
        + " / ".join(f"{v:.2f}" for v in np.percentile(ratio, [10, 25, 50, 75, 90]))
        + "; median by family: "
        + ", ".join(f"{f} {np.median(ratio[fam == f]):.2f}" for f in sorted(set(fam))),
        f"  declared/true median {np.median(decl / true):.2f}; declared short {np.mean(decl < true):.3f}; "
        f"infeasible alone on the declared count {bad.mean():.3f}; declined {declined.mean():.3f} "
        f"(of them infeasible alone {bad[declined].mean():.3f})",
    ]
    if "ElasticFlow-true" in met:
        a, b = met["ElasticFlow-true"], met["ElasticFlow"]
        out.append(
            f"  met by ElasticFlow-true, not ElasticFlow: {np.mean((a == 1) & (b == 0)):.3f}; "
            f"the reverse: {np.mean((a == 0) & (b == 1)):.3f}"
        )
    return "\n".join(out)
