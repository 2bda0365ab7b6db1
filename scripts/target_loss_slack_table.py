"""Every target-loss method on windows of 300 consecutive jobs of ITP clusters, and the table of
docs/traces-target-loss.md built from those runs (resumable: a run whose results.json exists is not run again).

    python scripts/target_loss_slack_table.py run   <out> <cluster> <chunk> <method,...> [<band>]
    python scripts/target_loss_slack_table.py bound <out> <cluster> <chunk>
    python scripts/target_loss_slack_table.py table <out> <cluster,...> <chunk,...> <method,...>

A window is a chunk of 300 consecutive jobs by submission time (chunk k: jobs 300 k + 1 ... 300 (k + 1)), replayed
from an empty cluster like ``trace.first_jobs`` (the file is written once into ``data_cache/trace_chunks``).
Chunk 0 of clusters 02 and 07 is the validation set (choices only); chunks 1-3 of every cluster are evaluated.
``run`` replays the methods on one chunk in this process (mara.traces.target_run.run_target_loss, the trace
experiment's own code; ``band``: Slack-QR-q's trace_band, else its config's) into ``<out>/<cluster>/c<chunk>/<run>``;
``bound`` solves the relaxed GPU-time capacity bound (mara/bounds/trace_capacity.py) of a chunk; ``table`` prints, per
cluster, each method's deadline-met ratio (mean ± standard error over chunks) and its paired difference to
ElasticFlow (declared counts) on identical jobs, and the mean over clusters.
"""

from __future__ import annotations

import csv
import json
import sys
from pathlib import Path

import numpy as np

ROOT = Path(__file__).resolve().parents[1]
TRACES = ROOT / "data_cache" / "itp-traces" / "elasticflow"
CHUNKS = ROOT / "data_cache" / "trace_chunks"
SPEC = {"01": "n64g8", "02": "n64g8", "03": "n64g8", "05": "n64g8", "07": "n128g8", "08": "n128g8"}
CHUNK = 300
#: methods planning on estimates ask the predictor at most once per trace hour
ESTIMATE_EVERY_S = 3600
BASE = "ElasticFlow"
BOUND = "Capacity-bound"


def chunk_csv(cluster: str, k: int) -> Path:
    """Jobs 300 k + 1 ... 300 (k + 1) of a cluster's trace by submission time, as a trace file."""
    p = CHUNKS / f"cluster{cluster}_c{k}.csv"
    if not p.exists():
        with open(TRACES / f"cluster{cluster}.csv", newline="") as fh:
            rd = csv.DictReader(fh)
            rows = sorted(rd, key=lambda r: int(r["submission_time"]))
            fields = rd.fieldnames
        part = rows[CHUNK * k : CHUNK * (k + 1)]
        if len(part) < CHUNK:
            raise SystemExit(f"cluster{cluster} has no chunk {k} of {CHUNK} jobs")
        p.parent.mkdir(parents=True, exist_ok=True)
        with open(p, "w", newline="") as fh:
            w = csv.DictWriter(fh, fieldnames=fields)
            w.writeheader()
            w.writerows(part)
    return p


def run_dir(out: Path, cluster: str, k: int, name: str) -> Path:
    return out / cluster / f"c{k}" / name


def run(out: Path, cluster: str, k: int, methods: list, band: str | None = None) -> Path:
    from mara.traces.settings import trace_run_settings
    from mara.traces.target_run import run_target_loss

    name = ",".join(methods) + (f"_band-{band}" if band else "")
    d = run_dir(out, cluster, k, name)
    if (d / "results.json").exists():
        return d
    over = {"Slack-QR-q": {"trace_band": band}} if band else {}
    run_settings = trace_run_settings(
        {
            "methods": methods,
            "method_overrides": over,
            "eval": {"tensorboard": False},
            "trace": {
                "path": str(chunk_csv(cluster, k)),
                "cluster": SPEC[cluster],
                "jobs": "target_loss",
                "estimate_every_s": ESTIMATE_EVERY_S,
            },
        }
    )
    d.mkdir(parents=True, exist_ok=True)
    run_target_loss(run_settings, d, log=lambda s: print(f"[{cluster} c{k}] {s}", flush=True))
    return d


def bound(out: Path, cluster: str, k: int, time_limit_s: float = 60.0) -> Path:
    """The relaxed capacity bound of a chunk's jobs, as a run named BOUND."""
    from mara.bounds.trace_capacity import capacity_bound, gpu_seconds_needed
    from mara.traces.schema import load_trace, parse_cluster
    from mara.traces.throughput import job_speeds, known_models

    d = run_dir(out, cluster, k, BOUND)
    if (d / "results.json").exists():
        return d
    cl = parse_cluster(SPEC[cluster])
    jobs = load_trace(str(chunk_csv(cluster, k)), cl, 1.5, known_models())
    tput = np.maximum(job_speeds(jobs, "table", cl.gpus)[0], job_speeds(jobs, "elasticflow", cl.gpus)[0])
    gs, ws = gpu_seconds_needed(jobs.iterations.astype(np.float64), tput, cl.gpus)
    ub, pick = capacity_bound(jobs.submit, jobs.deadline, gs, ws, cl.gpus, time_limit_s)
    print(f"{cluster} c{k}: bound {ub:.0f} of {jobs.n_jobs} jobs ({ub / jobs.n_jobs:.3f})", flush=True)
    d.mkdir(parents=True, exist_ok=True)
    (d / "results.json").write_text(json.dumps({"bound": ub, "jobs": int(jobs.n_jobs)}))
    return d


def met_by_method(out: Path, cluster: str, k: int) -> dict:
    """{method: {job_id: deadline_met}} over every run of a chunk (the bound: {"*": its share})."""
    res = {}
    base = out / cluster / f"c{k}"
    for d in sorted(base.glob("*/results.json")) if base.exists() else []:
        r = json.loads(d.read_text())
        if "bound" in r:
            res[BOUND] = {"*": r["bound"] / r["jobs"]}
            continue
        tag = d.parent.name.split("_band-")
        for row in r["rows"]:
            m = row["method"] + (f" ({tag[1]})" if len(tag) > 1 else "")
            res.setdefault(m, {})[row["job_id"]] = row["deadline_met"]
    return res


def mean_se(x) -> tuple[float, float]:
    x = np.asarray(list(x), dtype=float)
    return float(x.mean()), (float(x.std(ddof=1) / np.sqrt(x.size)) if x.size > 1 else 0.0)


def table(out: Path, clusters, chunks, methods) -> str:
    lines = ["| cluster | " + " | ".join(methods) + " |", "|---|" + "---|" * len(methods)]
    over = {m: [] for m in methods}
    for c in clusters:
        per = {k: met_by_method(out, c, k) for k in chunks}
        cells = []
        for m in methods:
            ks = [k for k in chunks if m in per[k]]
            if not ks:
                cells.append("-")
                continue
            wm = {k: float(np.mean(list(per[k][m].values()))) for k in ks}
            if len(ks) == len(chunks):
                over[m].append(np.mean(list(wm.values())))
            s = "{:.3f} ± {:.3f}".format(*mean_se(wm.values()))
            if m not in (BASE, BOUND) and all(BASE in per[k] for k in ks):
                for k in ks:
                    assert set(per[k][m]) == set(per[k][BASE]), f"{c} c{k} {m}: not the same jobs as {BASE}"
                s += " ({:+.3f} ± {:.3f})".format(*mean_se(wm[k] - np.mean(list(per[k][BASE].values())) for k in ks))
            cells.append(s + ("" if len(ks) == len(chunks) else f" [{len(ks)} of {len(chunks)}]"))
        lines.append(f"| {c} | " + " | ".join(cells) + " |")
    lines.append(
        "| mean over clusters | "
        + " | ".join(
            "{:.3f} ± {:.3f}".format(*mean_se(over[m])) if len(over[m]) == len(clusters) else "-" for m in methods
        )
        + " |"
    )
    return "\n".join(lines)


def main(argv) -> int:
    usage = __doc__.strip().splitlines()[3]
    try:
        cmd, out = argv[0], Path(argv[1])
        if cmd == "run":
            if argv[2] not in SPEC:
                raise ValueError
            run(out, argv[2], int(argv[3]), argv[4].split(","), argv[5] if len(argv) > 5 else None)
        elif cmd == "bound":
            if argv[2] not in SPEC:
                raise ValueError
            bound(out, argv[2], int(argv[3]))
        elif cmd == "table":
            print(table(out, argv[2].split(","), [int(k) for k in argv[3].split(",")], argv[4].split(",")))
        else:
            raise ValueError
    except (IndexError, ValueError):
        print(f"usage: {usage.strip()} (clusters {', '.join(SPEC)})", file=sys.stderr)
        return 2
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
