"""Generation progress: a rich bar with ETA on a terminal, one plain line per finished job otherwise; the ETA learns
each family's seconds per curve from the finished jobs, the shards already on disk, or a rough guess."""

from __future__ import annotations

import json
import os
import sys
import time
from datetime import datetime
from pathlib import Path

from mara.curves.plan import COST_GUESS_S, Job


class ProgressReporter:
    """Progress: rich bar with ETA on a terminal, one plain line per finished job otherwise."""

    def __init__(self, jobs: list[Job], parallel: int, quiet: bool = False, prior: dict | None = None):
        from rich.console import Console

        self.pending = {j: None for j in jobs}
        self.parallel, self.quiet, self.seen = max(1, parallel), quiet, {}
        self.prior = dict(prior or {})
        self.console = Console(stderr=True)
        self.n, self.done, self.t0 = len(jobs), 0, time.time()
        self.progress = None
        if self.console.is_terminal and not quiet:
            from rich.progress import (
                BarColumn,
                MofNCompleteColumn,
                Progress,
                TextColumn,
                TimeElapsedColumn,
            )

            self.progress = Progress(
                TextColumn("[bold]curves"),
                BarColumn(),
                MofNCompleteColumn(),
                TimeElapsedColumn(),
                TextColumn("eta {task.fields[eta]} · {task.fields[last]}"),
                console=self.console,
            )
            self.task = self.progress.add_task("gen", total=self.n, eta="?", last="")
            self.progress.start()

    def eta_seconds(self) -> float:
        def est(fam):
            s = self.seen.get(fam)
            if s:
                return sum(s) / len(s)
            return self.prior.get(fam, COST_GUESS_S.get(fam, 600))

        return sum(est(j.family) for j in self.pending) / self.parallel

    def update(self, result: dict) -> None:
        job = Job(**result["job"])
        self.pending.pop(job, None)
        self.done += 1
        if result["status"] == "done":
            self.seen.setdefault(job.family, []).append(result["seconds"])
        eta = _fmt(self.eta_seconds())
        last = f"{job.curve_id} {result['status']} {result['seconds']:.1f}s"
        if result["status"] == "error":
            last += f" ({result['error']})"
        if self.progress is not None:
            self.progress.update(self.task, advance=1, eta=eta, last=last)
        elif not self.quiet:
            stamp = datetime.now().strftime("%H:%M:%S")
            print(f"{stamp} [{self.done}/{self.n}] {last} | eta {eta}", file=sys.stderr, flush=True)

    def close(self) -> None:
        if self.progress is not None:
            self.progress.stop()


def measured_seconds(shard_dir: str | os.PathLike, families, accelerator: str = "cpu", per_family: int = 20) -> dict:
    """Mean recorded wall time per curve of each family's finished shards (same accelerator), for the ETA."""
    import pyarrow.parquet as pq

    out = {}
    for fam in families:
        times = []
        for path in sorted(Path(shard_dir).glob(f"{fam}__*.parquet"))[-per_family:]:
            try:
                meta = pq.read_table(path, columns=["meta"]).column("meta")[0].as_py()
                meta = json.loads(meta) if isinstance(meta, str) else meta
            except Exception:
                continue
            if (meta.get("device", "cpu") == "cpu") == (accelerator == "cpu") and meta.get("wall_time_s"):
                times.append(float(meta["wall_time_s"]))
        if times:
            out[fam] = sum(times) / len(times)
    return out


def _fmt(seconds: float) -> str:
    h, rem = divmod(int(seconds), 3600)
    return f"{h}h{rem // 60:02d}m" if h else f"{rem // 60}m{rem % 60:02d}s"
