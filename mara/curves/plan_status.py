"""How far a generation plan has got and what it cost (``python -m mara.generate_curves action=status``).

Per family and split: curves finished / planned; the compute the finished ones took, read from each shard's
``meta`` (``cpu_time_s``, the training process's CPU time, where recorded; in older shards ``wall_time_s`` ×
``threads``, less ``paused_s`` where a run was recorded as paused, e.g. by SIGSTOP while the machine ran something
else); and what the missing ones should take (the family's mean per finished
curve, or ``COST_GUESS_S`` before any is finished). Pure functions over shard files; nothing is written.
"""

from __future__ import annotations

import json
from collections import defaultdict
from pathlib import Path


def shard_meta(path: Path) -> dict:
    """The ``meta`` dict of a one-curve shard."""
    import pyarrow.parquet as pq

    meta = pq.read_table(path, columns=["meta"]).column("meta")[0].as_py()
    return json.loads(meta) if isinstance(meta, str) else dict(meta or {})


def curve_cost_s(meta: dict) -> float:
    """Compute seconds one curve took: its recorded CPU time, else (wall time − recorded pause) × threads."""
    if meta.get("cpu_time_s") is not None:
        return float(meta["cpu_time_s"])
    wall = float(meta.get("wall_time_s") or 0.0) - float(meta.get("paused_s") or 0.0)
    return max(wall, 0.0) * int(meta.get("threads") or 1)


def plan_status(jobs, shard_dir, guess_s: dict[str, float] | None = None) -> list[dict]:
    """One row per (family, split) of ``jobs`` in plan order: planned, done, spent_s, remaining_s, device(s)."""
    shard_dir = Path(shard_dir)
    rows: dict[tuple[str, str], dict] = {}
    per_family: dict[str, list[float]] = defaultdict(list)
    for job in jobs:
        row = rows.setdefault(
            (job.family, job.split),
            {
                "family": job.family,
                "split": job.split,
                "source": job.source,
                "planned": 0,
                "done": 0,
                "spent_s": 0.0,
                "devices": set(),
            },
        )
        row["planned"] += 1
        path = shard_dir / job.shard_name
        if path.exists():
            meta = shard_meta(path)
            cost = curve_cost_s(meta)
            row["done"] += 1
            row["spent_s"] += cost
            row["devices"].add(str(meta.get("device", "cpu")))
            per_family[job.family].append(cost)
    out = []
    for row in rows.values():
        done = per_family[row["family"]]
        each = sum(done) / len(done) if done else float((guess_s or {}).get(row["family"], 0.0))
        out.append(row | {"remaining_s": (row["planned"] - row["done"]) * each, "devices": sorted(row["devices"])})
    return out


def status_markdown(rows: list[dict], workers: int = 1) -> str:
    """The status table plus a totals line (hours; wall time on ``workers`` parallel single-thread workers)."""
    h = lambda s: f"{s / 3600:.2f}"  # noqa: E731
    lines = [
        "| family | split | source | done / planned | spent (CPU-h) | remaining, est. (CPU-h) |",
        "|---|---|---|---:|---:|---:|",
    ]
    for r in rows:
        lines.append(
            f"| {r['family']} | {r['split']} | {r['source']} | {r['done']} / {r['planned']} | "
            f"{h(r['spent_s'])} | {h(r['remaining_s'])} |"
        )
    done, planned = sum(r["done"] for r in rows), sum(r["planned"] for r in rows)
    spent, left = sum(r["spent_s"] for r in rows), sum(r["remaining_s"] for r in rows)
    devices = sorted({d for r in rows for d in r["devices"]})
    lines += [
        "",
        f"{done} of {planned} curves finished; spent {h(spent)} h of compute "
        f"({', '.join(devices) or 'none yet'}); remaining ≈ {h(left)} h, ≈ {h(left / max(workers, 1))} h wall "
        f"on {max(workers, 1)} worker{'s' if workers != 1 else ''}.",
    ]
    return "\n".join(lines)
