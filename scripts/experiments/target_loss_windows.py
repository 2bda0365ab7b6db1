"""Every target-loss method on windows of 300 consecutive jobs of ITP clusters (resumable: a run whose results.json
exists is not run again); the table of docs/traces-target-loss.md is ``python -m mara.report target-loss-windows``
on the same ``<out>``.

    python scripts/experiments/target_loss_windows.py run   <out> <cluster> <chunk> <method,...> [<band>]
    python scripts/experiments/target_loss_windows.py bound <out> <cluster> <chunk>

A window is a chunk of 300 consecutive jobs by submission time (chunk k: jobs 300 k + 1 ... 300 (k + 1)), replayed
from an empty cluster like ``trace.first_jobs`` (the file is written once into ``data_cache/trace_chunks``).
Chunk 0 of clusters 02 and 07 is the validation set (choices only); chunks 1-3 of every cluster are evaluated.
``run`` replays the methods on one chunk in this process (mara.traces.target_run.run_target_loss, the trace
experiment's own code; ``band``: Slack-QR-q's trace_band, else its config's) into ``<out>/<cluster>/c<chunk>/<run>``;
``bound`` solves the relaxed GPU-time capacity bound of a chunk (the bound method ``Capacity-bound``,
mara/bounds/trace_capacity.py).
"""

from __future__ import annotations

import csv
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
TRACES = ROOT / "data_cache" / "itp-traces" / "elasticflow"
CHUNKS = ROOT / "data_cache" / "trace_chunks"
SPEC = {"01": "n64g8", "02": "n64g8", "03": "n64g8", "05": "n64g8", "07": "n128g8", "08": "n128g8"}
CHUNK = 300
#: methods planning on estimates ask the predictor at most once per trace hour
ESTIMATE_EVERY_S = 3600
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
    from omegaconf import OmegaConf

    from mara.traces.target_run import run_target_loss

    name = ",".join(methods) + (f"_band-{band}" if band else "")
    d = run_dir(out, cluster, k, name)
    if (d / "results.json").exists():
        return d
    over = {"Slack-QR-q": {"trace_band": band}} if band else {}
    cfg = OmegaConf.create(
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
    run_target_loss(cfg, d, log=lambda s: print(f"[{cluster} c{k}] {s}", flush=True))
    return d


def bound(out: Path, cluster: str, k: int) -> Path:
    """The relaxed capacity bound of a chunk's jobs: the bound method (conf/method/Capacity-bound.yaml), as a run."""
    return run(out, cluster, k, [BOUND])


def main(argv) -> int:
    usage = (
        "python scripts/experiments/target_loss_windows.py run|bound <out> <cluster> <chunk> [<method,...> [<band>]]"
    )
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
        else:
            raise ValueError
    except (IndexError, ValueError):
        print(f"usage: {usage} (clusters {', '.join(SPEC)})", file=sys.stderr)
        return 2
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
