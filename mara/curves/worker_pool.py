"""Where generation jobs run: a pool of worker processes (CPU: single-thread workers; GPU: one process per device),
and the rank's share of the plan under torchrun/SLURM (rank r takes jobs r::world_size)."""

from __future__ import annotations

import os
from dataclasses import asdict
from typing import Iterator

from mara.curves.plan import Job
from mara.curves.training import GenerationSettings, run_job
from tasks_zoo.errors import ZooError

_WORKER: dict = {}  # this worker process's settings and device, set once by the pool's initializer


def _worker_init(settings: GenerationSettings, device_queue) -> None:
    import torch

    torch.set_num_threads(1)
    _WORKER["settings"] = settings
    _WORKER["device"] = device_queue.get() if device_queue is not None else None


def _worker_run(job: Job) -> dict:
    try:
        return run_job(job, _WORKER["settings"], _WORKER["device"])
    except ZooError as exc:
        return {"job": asdict(job), "status": "error", "error": str(exc), "seconds": 0.0}


def world_from_env() -> tuple[int, int, int | None]:
    """(rank, world_size, local device index) under torchrun (RANK/WORLD_SIZE) or SLURM (SLURM_PROCID/NTASKS)."""
    env = os.environ
    if "WORLD_SIZE" in env and int(env["WORLD_SIZE"]) > 1:
        return int(env.get("RANK", 0)), int(env["WORLD_SIZE"]), int(env.get("LOCAL_RANK", 0))
    if "SLURM_NTASKS" in env and int(env["SLURM_NTASKS"]) > 1:
        return int(env.get("SLURM_PROCID", 0)), int(env["SLURM_NTASKS"]), int(env.get("SLURM_LOCALID", 0))
    return 0, 1, None


def run_pool(jobs: list[Job], settings: GenerationSettings, nproc: int, gpu: bool) -> Iterator[dict]:
    """Run ``jobs`` on ``nproc`` worker processes; yields each job's status dict as it finishes (any order).
    A worker's ZooError (a user mistake, e.g. missing data) stops the run with its one line."""
    import multiprocessing as mp

    # CPU: fork (workers inherit the imported modules; torch re-inits its pools after fork);
    # GPU: spawn (CUDA cannot be used in forked children)
    ctx = mp.get_context("spawn" if gpu or "fork" not in mp.get_all_start_methods() else "fork")
    queue = ctx.Queue()
    for i in range(nproc):
        queue.put(i if gpu else None)
    with ctx.Pool(nproc, initializer=_worker_init, initargs=(settings, queue)) as pool:
        for res in pool.imap_unordered(_worker_run, jobs, chunksize=1):
            if res["status"] == "error":
                raise ZooError(res["error"])
            yield res
