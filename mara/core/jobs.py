"""A resumable graph of jobs run by single-threaded worker processes (what ``experiment=paper`` schedules).

Each :class:`Job` has a folder: its ``job.log`` (everything the worker prints) and, once it succeeded, a
``DONE.json`` marker holding the job's result. A job starts when every job it depends on has finished — done or
failed — and receives ``{dependency name: its result, or None if it failed}``; it decides itself whether it can go on
without a failed dependency. Ready jobs start costliest first, so the long ones do not trail at the end; a rerun
skips every job with a marker. The parent logs one progress line (done, running, ETA) at least every ``poll_s``.
"""

from __future__ import annotations

import json
import multiprocessing as mp
import os
import re
import sys
import time
from concurrent.futures import FIRST_COMPLETED, ProcessPoolExecutor, wait
from dataclasses import dataclass, field
from pathlib import Path
from typing import Callable

from mara.core.files import write_text_atomic
from mara.core.rundir import recorded_result, relative_paths
from mara.core.runlog import Progress, fmt_seconds, log, setup_logging

MARKER = "DONE.json"
LOG = "job.log"


@dataclass
class Job:
    name: str  # unique, shown in the progress lines
    folder: Path  # job.log and DONE.json go here
    fn: Callable  # module-level fn(*args, deps: dict) -> dict (JSON-able), run in a worker
    args: tuple = ()
    deps: tuple[str, ...] = ()
    cost: float = 1.0  # relative CPU cost: start order and the ETA's weights
    log_name: str = field(default=LOG)


PATHS_KEY = "_paths"  # the keys of a marker's result that are files of the job's folder, stored relative to it


def done_info(folder: Path) -> dict | None:
    """The result a finished job left in ``folder`` (None when it has not finished), its files resolved inside
    ``folder`` (a moved or copied run uses its own); a recorded file outside the folder is one ConfigError line."""

    p = Path(folder) / MARKER
    if not p.exists():
        return None
    info = json.loads(p.read_text())
    marked = info.pop(PATHS_KEY, []) if isinstance(info, dict) else []
    return recorded_result(Path(folder), {"result": info, "paths": marked}, MARKER)[0]


def mark_done(folder: Path, info: dict) -> None:
    """Write ``folder``'s marker: the job's result, the files of the folder it names stored relative to it."""

    folder = Path(folder)
    folder.mkdir(parents=True, exist_ok=True)
    stored, paths = relative_paths(json.loads(json.dumps(info, default=str)), folder)
    write_text_atomic(folder / MARKER, json.dumps({**stored, PATHS_KEY: paths}, indent=1, default=str))


def last_percent(log_file: Path) -> float:
    """The last progress percentage written into a job's log (``...:  42.0% ...``; 0 if none yet)."""
    try:
        with open(log_file, "rb") as fh:
            fh.seek(0, os.SEEK_END)
            fh.seek(max(0, fh.tell() - 4000))
            text = fh.read().decode("utf-8", "replace")
    except OSError:
        return 0.0
    found = re.findall(r": +(\d+(?:\.\d+)?)% ", text)
    return min(float(found[-1]) / 100, 1.0) if found else 0.0


def critical_path(jobs: list[Job]) -> dict[str, float]:
    """Each job's cost plus the costliest chain of jobs waiting on it: ready jobs start highest first, so a short
    job that gates long ones (the FM stage before the trainings) is not left behind a long independent one."""
    after: dict[str, list[str]] = {j.name: [] for j in jobs}
    for j in jobs:
        for d in j.deps:
            after[d].append(j.name)
    cost = {j.name: j.cost for j in jobs}
    memo: dict[str, float] = {}

    def level(n: str, seen: tuple = ()) -> float:
        if n in seen:
            raise ValueError(f"jobs: dependency cycle through {n!r}")
        if n not in memo:
            memo[n] = cost[n] + max((level(m, seen + (n,)) for m in after[n]), default=0.0)
        return memo[n]

    return {n: level(n) for n in cost}


def _in_worker(fn: Callable, args: tuple, deps: dict, log_path: str) -> dict:
    """Worker side: one thread, every line the job prints (Python, Lightning, C libraries) into its own log."""
    os.environ["OMP_NUM_THREADS"] = os.environ["MKL_NUM_THREADS"] = "1"
    Path(log_path).parent.mkdir(parents=True, exist_ok=True)
    sys.stdout.flush()
    sys.stderr.flush()
    fd = os.open(log_path, os.O_WRONLY | os.O_CREAT | os.O_APPEND, 0o644)
    os.dup2(fd, 1)
    os.dup2(fd, 2)
    os.close(fd)
    import torch

    torch.set_num_threads(1)

    setup_logging()
    t0 = time.time()
    info = fn(*args, deps=deps) or {}
    if not isinstance(info.get("wall_s"), (int, float)):
        info["wall_s"] = time.time() - t0
    sys.stdout.flush()
    sys.stderr.flush()
    return info


def run_jobs(jobs: list[Job], workers: int, title: str = "jobs", poll_s: float = 15.0) -> tuple[dict, dict]:
    """Run every unfinished job, ``workers`` at a time; returns ({name: result}, {name: one-line error})."""
    names = [j.name for j in jobs]
    if len(set(names)) != len(names):
        raise ValueError(f"{title}: duplicate job names")
    by_name = {j.name: j for j in jobs}
    for j in jobs:
        for d in j.deps:
            if d not in by_name:
                raise ValueError(f"{title}: job {j.name!r} depends on unknown job {d!r}")
    results: dict = {}
    errors: dict = {}
    for j in jobs:
        info = done_info(j.folder)
        if info is not None:
            results[j.name] = info
    if results:
        log.info(f"{title}: {len(results)} of {len(jobs)} jobs already done, skipped ({', '.join(results)})")
    pending = [j for j in jobs if j.name not in results]
    if not pending:
        return results, errors
    total_cost = sum(j.cost for j in pending)
    this_run = {j.name for j in pending}
    rank = critical_path(jobs)
    progress = Progress(f"{title} ({len(pending)} jobs)", every_s=30.0)
    for var in ("OMP_NUM_THREADS", "MKL_NUM_THREADS", "OPENBLAS_NUM_THREADS"):  # inherited before any import
        os.environ[var] = "1"
    t0 = time.time()
    workers = max(1, min(int(workers), len(pending)))
    log.info(f"{title}: {len(pending)} jobs to run, {workers} at a time; each job's output: <its folder>/{LOG}")
    running: dict = {}
    with ProcessPoolExecutor(max_workers=workers, mp_context=mp.get_context("spawn"), max_tasks_per_child=1) as pool:
        while pending or running:
            finished_names = set(results) | set(errors)
            ready = [j for j in pending if all(d in finished_names for d in j.deps)]
            for j in sorted(ready, key=lambda j: -rank[j.name]):
                if len(running) >= workers:
                    break
                deps = {d: results.get(d) for d in j.deps}
                log_path = str(Path(j.folder) / j.log_name)
                running[pool.submit(_in_worker, j.fn, j.args, deps, log_path)] = (j, time.time())
                pending.remove(j)
                log.info(f"{title}: started {j.name}")
            done_cost = sum(by_name[n].cost for n in this_run if n in results or n in errors)
            partial = sum(j.cost * last_percent(Path(j.folder) / j.log_name) for j, _ in running.values())
            n_finished = len(jobs) - len(pending) - len(running)
            run_txt = ", ".join(
                f"{j.name} {100 * last_percent(Path(j.folder) / j.log_name):.0f}%" for j, _ in running.values()
            )
            progress.update(
                min((done_cost + partial) / total_cost, 0.999) if (pending or running) else 1.0,
                f"· {n_finished}/{len(jobs)} finished" + (f"; running: {run_txt}" if run_txt else ""),
            )
            if not running:  # unreachable: unknown dependencies and cycles are refused above
                raise RuntimeError(f"{title}: no job can start ({', '.join(j.name for j in pending)})")
            finished, _ = wait(list(running), timeout=poll_s, return_when=FIRST_COMPLETED)
            for f in finished:
                j, started = running.pop(f)
                try:
                    info = f.result()
                except Exception as exc:  # one failed job does not stop the others
                    reason = " ".join(str(exc).split()) or type(exc).__name__
                    errors[j.name] = f"{type(exc).__name__}: {reason}"[:500]
                    log.error(
                        f"{title}: {j.name} failed after {fmt_seconds(time.time() - started)}: {errors[j.name]} "
                        f"(log: {Path(j.folder) / j.log_name})"
                    )
                else:
                    mark_done(j.folder, info)
                    results[j.name] = info
                    log.info(f"{title}: {j.name} done in {fmt_seconds(time.time() - started)}")
    progress.update(1.0, f"· {len(jobs) - len(pending)}/{len(jobs)} finished")
    log.info(
        f"{title}: finished in {fmt_seconds(time.time() - t0)}"
        + (f", {len(errors)} failed: {', '.join(errors)}" if errors else "")
    )
    return results, errors
