"""Solving episodes of a bound in parallel processes (the episodes are independent; CP-SAT runs one worker each).

``map_episodes(fn, jobs, workers)`` is ``[fn(*job) for job in jobs]``, in order, with ``workers`` forked processes
when ``workers > 1`` (``0``: one per CPU core). ``fn`` must be a module-level function (it is pickled by name).
"""

from __future__ import annotations

import multiprocessing as mp
import os
from concurrent.futures import ProcessPoolExecutor, as_completed
from typing import Callable, Sequence


def resolve_workers(workers) -> int:
    """``workers`` as a positive process count (0 → the number of CPU cores); ValueError otherwise."""
    if isinstance(workers, bool) or not isinstance(workers, int) or workers < 0:
        raise ValueError(f"workers must be an integer >= 0 (0: one per CPU core), got {workers!r}")
    return workers or (os.cpu_count() or 1)


def map_episodes(
    fn: Callable, jobs: Sequence[tuple], workers: int = 1, progress: Callable[[float], None] | None = None
) -> list:
    """``[fn(*job) for job in jobs]`` (order kept); ``progress(fraction done)`` after each job."""
    workers = min(resolve_workers(workers), max(len(jobs), 1))
    if workers <= 1:
        out = []
        for i, job in enumerate(jobs):
            out.append(fn(*job))
            if progress is not None:
                progress((i + 1) / len(jobs))
        return out
    with ProcessPoolExecutor(max_workers=workers, mp_context=mp.get_context("fork")) as pool:
        futures = [pool.submit(fn, *job) for job in jobs]
        for i, _ in enumerate(as_completed(futures)):
            if progress is not None:
                progress((i + 1) / len(jobs))
        return [f.result() for f in futures]
