"""Every target-loss method on day windows of ITP clusters, one run per (cluster, split, method), and the table of
docs/traces-target-loss.md built from those runs (resumable: a run whose results.json exists is not run again).

    python scripts/target_loss_slack_table.py run  <out> <split: val|eval> <cluster> <method> [<hydra override> ...]
    python scripts/target_loss_slack_table.py bound <out> <split> <cluster>
    python scripts/target_loss_slack_table.py table <out> <split> <cluster,...> <method,...>

``run`` replays the windows (``WINDOWS`` below, the cluster's spec from mara/peers/cases.py) of one method, niced,
into ``<out>/<split>/<cluster>/<method>[<tag>]`` (the tag names the extra overrides); ``table`` prints, per cluster,
each method's deadline-met ratio (mean ± standard error over windows) and its paired difference to ElasticFlow
(declared counts) on identical jobs, and the mean over clusters. ``bound`` solves the relaxed GPU-time capacity bound
(mara/traces/bound.py) of each window's scored jobs; ``table`` lists it as the method ``Capacity-bound``.
"""

from __future__ import annotations

import json
import os
import re
import subprocess
import sys
from pathlib import Path

import numpy as np

ROOT = Path(__file__).resolve().parents[1]
TRACES = ROOT / "data_cache" / "itp-traces" / "elasticflow"
SPEC = {"01": "n64g8", "02": "n64g8", "03": "n64g8", "05": "n64g8", "07": "n128g8", "08": "n128g8"}
#: weekly windows after a day of warm-up: one validation week, then three evaluation weeks (docs/traces-target-loss.md)
WINDOWS = ["trace.window_s=604800", "trace.warmup_s=86400", "trace.windows=3", "trace.val_windows=1"]
#: methods planning on estimates ask the predictor at most once per trace hour
COMMON = ["trace.jobs=target_loss", "trace.estimate_every_s=3600", "eval.tensorboard=false"]
BASE = "ElasticFlow"
BOUND = "Capacity-bound"


def run_dir(out: Path, split: str, cluster: str, method: str, extra) -> Path:
    tag = "".join("_" + re.sub(r"[^A-Za-z0-9.-]+", "-", e.split(".")[-1]) for e in extra)
    return out / split / cluster / f"{method}{tag}"


def run(out: Path, split: str, cluster: str, method: str, extra) -> Path:
    d = run_dir(out, split, cluster, method, extra)
    if (d / "results.json").exists():
        return d
    cmd = [
        "nice",
        "-n",
        "10",
        sys.executable,
        "-m",
        "mara.evaluate",
        "experiment=trace",
        f"trace.path={TRACES / f'cluster{cluster}.csv'}",
        f"trace.cluster={SPEC[cluster]}",
        f"trace.split={split}",
        f"methods=[{method}]",
        f"paths.output_dir={d}",
        *WINDOWS,
        *COMMON,
        *extra,
    ]
    print(" ".join(cmd[3:]), flush=True)
    subprocess.run(cmd, check=True, cwd=ROOT, env=dict(os.environ, PYTHONPATH=str(ROOT)))
    return d


def bound(out: Path, split: str, cluster: str, time_limit_s: float = 60.0) -> Path:
    """The relaxed capacity bound (mara/traces/bound.py) of every window's scored jobs, as a run named BOUND."""
    from omegaconf import OmegaConf

    from mara.traces.bound import capacity_bound, gpu_seconds_needed
    from mara.traces.run import check_trace_run
    from mara.traces.schema import window_jobs
    from mara.traces.throughput import job_speeds

    d = run_dir(out, split, cluster, BOUND, [])
    if (d / "results.json").exists():
        return d
    over = [o.split("=", 1) for o in WINDOWS]
    tc = {k.split(".", 1)[1]: int(v) for k, v in over}
    cfg = OmegaConf.create(
        {
            "trace": {"path": str(TRACES / f"cluster{cluster}.csv"), "cluster": SPEC[cluster], "split": split, **tc},
            "methods": ["EDF"],
        }
    )
    ts, trace, _, windows = check_trace_run(cfg)
    rows = []
    for w in windows:
        jobs, scored = window_jobs(trace, w)
        jobs = jobs.take(np.flatnonzero(scored))
        tput = np.maximum(
            job_speeds(jobs, "table", ts.cluster.gpus)[0], job_speeds(jobs, "elasticflow", ts.cluster.gpus)[0]
        )
        gs, ws = gpu_seconds_needed(jobs.iterations.astype(np.float64), tput, ts.cluster.gpus)
        ub, pick = capacity_bound(jobs.submit, jobs.deadline, gs, ws, ts.cluster.gpus, time_limit_s)
        print(
            f"{cluster} {split} window {w.index}: bound {ub:.0f} of {jobs.n_jobs} jobs ({ub / jobs.n_jobs:.3f})",
            flush=True,
        )
        # rows carry the selection found; the bound itself (>= it) goes to the window record
        rows += [{"window": w.index, "job_id": str(j), "deadline_met": int(p)} for j, p in zip(jobs.job_id, pick)]
        rows.append({"window": w.index, "bound": ub, "jobs": int(jobs.n_jobs)})
    d.mkdir(parents=True, exist_ok=True)
    (d / "results.json").write_text(json.dumps({"bound_rows": rows}))
    return d


def per_window(d: Path) -> dict:
    """{(window, job_id): deadline_met} of one run."""
    res = json.loads((d / "results.json").read_text())
    if "bound_rows" in res:  # the relaxed bound: its proven number per window, spread over the window's jobs
        b = {r["window"]: r["bound"] / max(r["jobs"], 1) for r in res["bound_rows"] if "bound" in r}
        return {(r["window"], r["job_id"]): b[r["window"]] for r in res["bound_rows"] if "job_id" in r}
    return {(r["window"], r["job_id"]): r["deadline_met"] for r in res["rows"]}


def window_means(rows: dict) -> dict:
    acc: dict = {}
    for (w, _), v in rows.items():
        acc.setdefault(w, []).append(v)
    return {w: float(np.mean(v)) for w, v in acc.items()}


def mean_se(x) -> tuple[float, float]:
    x = np.asarray(list(x), dtype=float)
    return float(x.mean()), (float(x.std(ddof=1) / np.sqrt(x.size)) if x.size > 1 else 0.0)


def table(out: Path, split: str, clusters, methods) -> str:
    lines = ["| cluster (jobs per window) | " + " | ".join(methods) + " |", "|---|" + "---|" * len(methods)]
    over = {m: [] for m in methods}
    for c in clusters:
        runs = {
            m: per_window(run_dir(out, split, c, m, []))
            for m in methods
            if (run_dir(out, split, c, m, []) / "results.json").exists()
        }
        base = runs.get(BASE)
        sizes = {}
        for w, _ in next(iter(runs.values())):
            sizes[w] = sizes.get(w, 0) + 1
        cells = []
        for m in methods:
            if m not in runs:
                cells.append("-")
                continue
            wm = window_means(runs[m])
            over[m].append(np.mean(list(wm.values())))
            s = "{:.3f} ± {:.3f}".format(*mean_se(wm.values()))
            if base is not None and m != BASE:
                assert set(runs[m]) == set(base), f"{c} {m}: not the same jobs as {BASE}"
                bw = window_means(base)
                s += " ({:+.3f} ± {:.3f})".format(*mean_se(wm[w] - bw[w] for w in wm))
            cells.append(s)
        lines.append(f"| {c} ({', '.join(str(sizes[w]) for w in sorted(sizes))}) | " + " | ".join(cells) + " |")
    lines.append(
        "| mean over clusters | " + " | ".join(f"{np.mean(over[m]):.3f}" if over[m] else "-" for m in methods) + " |"
    )
    return "\n".join(lines)


def main(argv) -> int:
    if len(argv) == 4 and argv[0] == "bound" and argv[2] in ("val", "eval") and argv[3] in SPEC:
        bound(Path(argv[1]), argv[2], argv[3])
        return 0
    if len(argv) < 5 or argv[0] not in ("run", "table") or argv[2] not in ("val", "eval"):
        print(__doc__.strip().splitlines()[2], file=sys.stderr)
        return 2
    out = Path(argv[1])
    if argv[0] == "run":
        if argv[3] not in SPEC:
            print(f"cluster must be one of {', '.join(SPEC)}, got {argv[3]!r}", file=sys.stderr)
            return 2
        run(out, argv[2], argv[3], argv[4], argv[5:])
        return 0
    print(table(out, argv[2], argv[3].split(","), argv[4].split(",")))
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
