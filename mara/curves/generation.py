"""Curve-bank generation, orchestrated: plan the (family, split, index) jobs (:mod:`mara.curves.plan`), train each
with Lightning and write one shard per job (:mod:`mara.curves.training`) in this process or a worker pool
(:mod:`mara.curves.worker_pool`) with progress and ETA (:mod:`mara.curves.progress`), then merge the shards into a
bank (:mod:`mara.curves.merge`) and plot it (:mod:`mara.curves.plots`).

Finished jobs are Parquet shards in ``shard_dir`` and are skipped on restart; runs whose loss turns non-finite are
logged to ``shard_dir/failures.jsonl`` and retried with the next attempt's recipe.
"""

from __future__ import annotations

import os
import sys
from pathlib import Path

from mara.curves.merge import merge
from mara.curves.plan import (
    COST_GUESS_S,
    COST_ORDER,
    GROUP_ORDER,
    SOURCES,
    Job,
    batch_size_choices,
    check_request,
    derive_seed,
    family_cap,
    in_distribution,
    job_recipe,
    plan_jobs,
)
from mara.curves.plots import plot_bank_grid, plot_bank_to_tensorboard
from mara.curves.progress import ProgressReporter, measured_seconds
from mara.curves.training import GenerationSettings, code_version, partial_checkpoint, run_job, train_curve
from mara.curves.worker_pool import run_pool, world_from_env

__all__ = [
    "COST_GUESS_S",
    "COST_ORDER",
    "GROUP_ORDER",
    "SOURCES",
    "GenerationSettings",
    "Job",
    "ProgressReporter",
    "batch_size_choices",
    "check_request",
    "code_version",
    "derive_seed",
    "family_cap",
    "generate",
    "in_distribution",
    "job_recipe",
    "measured_seconds",
    "merge",
    "partial_checkpoint",
    "plan_jobs",
    "plot_bank_grid",
    "plot_bank_to_tensorboard",
    "prepare_real_data",
    "run_job",
    "train_curve",
    "world_from_env",
]


def prepare_real_data(jobs: list[Job], settings: GenerationSettings) -> None:
    """Find (and unpack or download once) every real data set the jobs need, before any worker starts:
    missing data stops here with one line, and workers never unpack the same archive side by side."""
    from tasks_zoo.registry import build_datamodule

    seen = set()
    for fam in sorted({j.family for j in jobs if j.source == "real"}):
        dm = build_datamodule(
            fam,
            seed=0,
            batch_size=1,
            source="real",
            data_root=settings.data_root,
            cache_dir=settings.cache_dir,
            download=settings.download,
        )
        if (type(dm), dm.archive) not in seen:  # each data set once
            seen.add((type(dm), dm.archive))
            dm.prepare_data()


def generate(
    families="all",
    counts: dict | None = None,
    *,
    shard_dir: str | os.PathLike,
    cap: int | None = None,
    source: str = "synthetic",
    source_overrides: dict | None = None,
    workers: int = 1,
    accelerator: str = "cpu",
    devices: int = 1,
    data_root: str = "data_cache",
    cache_dir: str = "data_cache",
    download: bool = False,
    max_attempts: int = 3,
    quiet: bool = False,
    checkpoint_every: int = 0,
) -> list[dict]:
    """Run every unfinished job of the plan (this rank's share under torchrun/SLURM); returns per-job status dicts."""
    counts = dict(counts or {"pool": 30, "fm_val": 10, "fm_train": 50})
    jobs = plan_jobs(families, counts, source, source_overrides)
    shard_dir = Path(shard_dir)
    shard_dir.mkdir(parents=True, exist_ok=True)
    rank, world, local = world_from_env()
    jobs = jobs[rank::world]
    todo = [j for j in jobs if not (shard_dir / j.shard_name).exists()]
    settings = GenerationSettings(
        shard_dir=str(shard_dir),
        cap=cap,
        data_root=str(data_root),
        cache_dir=str(cache_dir),
        download=bool(download),
        accelerator=accelerator,
        max_attempts=int(max_attempts),
        code_version=code_version(),
        checkpoint_every=int(checkpoint_every or 0),
    )
    prepare_real_data(todo, settings)
    gpu = accelerator not in ("cpu",)
    nproc = 1 if world > 1 else (int(devices) if gpu else int(workers))
    if not quiet:
        print(
            f"generate: {len(jobs)} jobs, {len(jobs) - len(todo)} already done, {len(todo)} to run on "
            f"{nproc} {'device process' if gpu else 'worker'}{'es' if nproc > 1 and gpu else 's' if nproc > 1 else ''} "
            f"(rank {rank}/{world}) -> {shard_dir}",
            file=sys.stderr,
            flush=True,
        )
    prior = measured_seconds(shard_dir, sorted({j.family for j in todo}), accelerator)
    reporter = ProgressReporter(todo, nproc, quiet, prior)
    results = []
    try:
        if nproc <= 1:
            import torch

            if not gpu:
                torch.set_num_threads(1)
            dev = local if gpu else None
            for job in todo:
                res = run_job(job, settings, dev if dev is not None else (0 if gpu else None))
                results.append(res)
                reporter.update(res)
        else:
            for res in run_pool(todo, settings, nproc, gpu):
                results.append(res)
                reporter.update(res)
    finally:
        reporter.close()
    return results
