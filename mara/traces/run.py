"""``python -m mara.evaluate experiment=trace``: every trace scheduler on identical jobs of a trace's windows.

Settings (``trace.*``, conf/experiment/trace.yaml, parsed once into ``TraceRunSettings``, mara/traces/settings.py):
the CSV, the cluster spec, the scheduling slot, the windows (or the first N jobs), the deadline factor of raw traces,
rigid or elastic jobs. Every method sees the same jobs; the
results are one row per method × window × job (``deadline_met`` 0/1) in ``results.json``, and ``results.md`` with
the operator's tables (docs/traces.md). The folder's results merge by method (mara/traces/report.py): the rows of
methods this run does not list stay, and a listed method already replayed there with the same settings on the same
protocol is reused (``eval.resume``, default true).
"""

from __future__ import annotations

import time
from dataclasses import dataclass, field
from pathlib import Path
from types import SimpleNamespace

import numpy as np

from mara.core.registry import import_object
from mara.traces.replay import JobState, replay
from mara.traces.report import EarlierTrace, earlier_trace_results, write_trace_results
from mara.traces.schema import (
    SCHEMAS,
    SIZE_CLASSES,
    Trace,
    TraceError,
    Window,
    load_trace,
    make_windows,
    size_class,
    window_jobs,
)
from mara.traces.settings import TraceRunSettings, TraceSettings
from mara.traces.throughput import job_speeds, known_models


def trace_windows(ts: TraceSettings) -> tuple[Trace, list[Window]]:
    """The trace a run replays, read and checked, and the windows of its split, each with at least one job scored:
    a window with none is one TraceError line before any replay."""
    trace = load_trace(ts.path, ts.cluster, ts.deadline_factor, known_models())
    windows = make_windows(trace, ts.window_s, ts.warmup_s, ts.windows, ts.val_windows, ts.first_jobs)
    windows = [w for w in windows if w.split == ts.split]
    for w in windows:
        _, scored = window_jobs(trace, w, ts.first_jobs)
        if not scored.any():
            raise TraceError(
                f"{ts.path}: {w.split} window {w.index} ([{w.start}, {w.start + w.length}) s) holds no job to score; "
                f"pick another trace.window_s / trace.warmup_s or fewer windows"
            )
    return trace, windows


def build_scheduler(spec: dict, overhead: bool, gpus_per_node: int | None = None):
    """A trace scheduler from its method config's ``trace_scheduler`` block (``overhead``: charge set-up costs, for a
    scheduler that models them; ``gpus_per_node``: the cluster's nodes, for a scheduler that places jobs on them)."""
    import inspect

    from hydra.utils import get_class, instantiate

    cls = get_class(spec["_target_"])
    params = inspect.signature(cls).parameters
    kw = {"overhead": overhead} if "overhead" in params else {}
    if gpus_per_node is not None and "gpus_per_node" in params:
        kw["gpus_per_node"] = gpus_per_node
    return instantiate(spec, **kw)


def replay_window(trace: Trace, w: Window, ts: TraceSettings, spec: dict):
    """Replay one window under one scheduler: (jobs replayed, scored mask, Replay, wall seconds, CPU seconds)."""
    jobs, scored = window_jobs(trace, w, ts.first_jobs)
    sched = build_scheduler(spec, ts.overhead, ts.cluster.gpus_per_node)
    tput, max_level = job_speeds(jobs, sched.caps, ts.cluster.gpus, rigid=ts.rigid)
    state = JobState(jobs.submit, jobs.deadline, tput, max_level, jobs.iterations.copy(), ts.cluster.gpus, slot=ts.slot)
    t0, c0 = time.perf_counter(), time.process_time()
    rep = replay(state, sched, size_class(jobs.num_gpu), len(SIZE_CLASSES), time_limit=ts.time_limit_s)
    return jobs, scored, rep, time.perf_counter() - t0, time.process_time() - c0


def job_rows(method: str, w: Window, jobs: Trace, scored: np.ndarray, rep) -> list[dict]:
    """One row per scored job: the outcome of ``method`` on it."""
    rows = []
    cls = size_class(jobs.num_gpu)
    for j in np.flatnonzero(scored):
        fin, st = rep.finish[j], rep.started[j]
        rows.append(
            {
                "method": method,
                "window": w.index,
                "split": w.split,
                "job_id": str(jobs.job_id[j]),
                "num_gpu": int(jobs.num_gpu[j]),
                "size_class": SIZE_CLASSES[cls[j]],
                "model": str(jobs.model[j]) or "-",
                "submit": int(jobs.submit[j]),
                "deadline": int(jobs.deadline[j]),
                "deadline_met": int(rep.met[j]),
                "declined": int(rep.declined[j]),
                "finish": None if np.isnan(fin) else float(fin),
                "jct_s": None if np.isnan(fin) else float(fin - jobs.submit[j]),
                "queue_s": None if np.isnan(st) else float(st - jobs.submit[j]),
                "gpu_seconds": float(rep.gpu_seconds[j]),
            }
        )
    return rows


def trace_protocol(ts, trace, windows) -> dict:
    """What a trace run replayed (file, cluster, slots, windows, job model): the protocol block of its results."""
    protocol = {
        "trace": ts.path,
        "schema": trace.schema,
        "cluster": ts.cluster.name,
        "gpus": ts.cluster.gpus,
        "slot_s": ts.slot,
        "first_jobs": ts.first_jobs,
        "window_s": ts.window_s,
        "warmup_s": ts.warmup_s,
        "split": ts.split,
        "windows": [w.__dict__ for w in windows],
        "rigid": ts.rigid,
        "overhead": ts.overhead,
    }
    if not SCHEMAS[trace.schema].deadlines:
        protocol["deadline_factor"] = ts.deadline_factor
    return protocol


def method_settings(methods) -> dict:
    """{method: the trace settings its rows depend on}: its ``trace_scheduler`` block as replayed (a bound: its
    ``compute`` and time limit)."""
    return {m.name: {"bound": m.bound} if m.bound else {"trace_scheduler": m.scheduler} for m in methods}


def reuse(name: str, earlier: EarlierTrace, rows: list, windows_info: list, timings: dict, cpu: dict, log) -> bool:
    """Add to ``rows`` ... ``cpu`` what ``name`` left in the folder when it was replayed there with its present
    settings on this protocol (then True: it is not replayed again), else False."""
    done = earlier.kept.done.get(name)
    if done is None:
        return False
    log(
        f"{name}: replayed in this folder with these settings: its {len(done)} rows reused"
        " (eval.resume=false replays it)"
    )
    rows.extend(done)
    windows_info.extend(earlier.windows([name]))
    timings[name] = earlier.part("timings", [name]).get(name, 0.0)
    cpu.update(earlier.part("timings_cpu", [name]))
    return True


def run_trace(run: TraceRunSettings, out: Path, log=print) -> dict:
    """The trace experiment: every method on every window; writes results.json / results.md / figure / TensorBoard."""
    ts = run.trace
    trace, windows = trace_windows(ts)
    log(
        f"trace {ts.path}: {trace.n_jobs} jobs ({trace.schema} schema), "
        f"cluster {ts.cluster.name} ({ts.cluster.gpus} GPUs), "
        f"{len(windows)} {ts.split} window(s), methods {', '.join(m.name for m in run.methods)}"
    )
    protocol, settings = trace_protocol(ts, trace, windows), method_settings(run.methods)
    earlier = earlier_trace_results(out, protocol, settings, run.resume)
    t = TraceTally()
    for method in run.methods:
        name = method.name
        if reuse(name, earlier, t.rows, t.windows, t.timings, t.cpu, log):
            continue
        t.timings[name] = t.cpu[name] = 0.0
        if method.bound is not None:
            t.timings[name], t.cpu[name] = bound_windows(name, method.bound, trace, windows, ts, t.rows, t.windows, log)
            continue
        for w in windows:
            jobs, scored, rep, secs, cpu = replay_window(trace, w, ts, method.scheduler)
            t.cpu[name] += cpu
            log(
                t.add_window(
                    name, w is windows[0], w, jobs, scored, rep, secs, ts, job_rows(name, w, jobs, scored, rep)
                )
            )
    return t.write(protocol, out, run, settings, earlier)


def bound_windows(name: str, bound: dict, trace: Trace, windows, ts: TraceSettings, rows, windows_info, log):
    """A trace bound on every window: its rows (the best selection found, ``deadline_met`` 0/1 per scored job) and
    window records (``bound``: the proven bound on the jobs met) appended; -> (wall seconds, CPU seconds)."""
    compute, secs, cpu = import_object(bound["compute"]), 0.0, 0.0
    for w in windows:
        jobs, scored = window_jobs(trace, w, ts.first_jobs)
        t0, c0 = time.perf_counter(), time.process_time()
        met, gpu_s, ub = compute(jobs, scored, ts.cluster.gpus, bound["time_limit_s"])
        secs, cpu = secs + time.perf_counter() - t0, cpu + time.process_time() - c0
        nan, none = np.full(jobs.n_jobs, np.nan), np.zeros(jobs.n_jobs, dtype=np.int64)
        outcome = SimpleNamespace(met=met, declined=none, finish=nan, started=nan, gpu_seconds=gpu_s)
        rows.extend(job_rows(name, w, jobs, scored, outcome))
        n, nan_ms = int(scored.sum()), float("nan")
        windows_info.append(
            {
                "method": name,
                "window": w.index,
                "jobs": n,
                "replay_s": time.perf_counter() - t0,
                "bound": ub,
                "decisions": 0,
                "decision_ms_p50": nan_ms,
                "decision_ms_p99": nan_ms,
                "gpu_utilisation": nan_ms,
            }
        )
        log(f"{name} window {w.index}: at most {ub:.0f} of {n} jobs met ({ub / max(n, 1):.3f}), {secs:.1f} s")
    return secs, cpu


@dataclass
class TraceTally:
    """A trace run's results so far: job rows, per-window records, wall and CPU seconds per method, and each
    method's occupancy over its first window (the figure)."""

    rows: list = field(default_factory=list)
    windows: list = field(default_factory=list)
    timings: dict = field(default_factory=dict)
    cpu: dict = field(default_factory=dict)
    occupancy: dict = field(default_factory=dict)

    def add_window(self, name: str, first: bool, w, jobs, scored, rep, secs: float, ts: TraceSettings, rows) -> str:
        """Record method ``name``'s replay of window ``w`` (its job ``rows``); -> the window's log line."""
        self.timings[name] += secs
        self.rows.extend(rows)
        self.windows.append(window_record(name, w.index, jobs, scored, rep, secs, ts.cluster.gpus))
        if first:
            self.occupancy[name] = (rep.occupancy_t - rep.occupancy_t[0], rep.occupancy)
        return f"{name} window {w.index}: met {rep.met[scored].mean():.3f} of {int(scored.sum())} jobs in {secs:.1f} s"

    def write(self, protocol: dict, out: Path, run: TraceRunSettings, settings: dict, earlier: EarlierTrace) -> dict:
        """results.json / results.md / figure / TensorBoard of the run, merged with the folder's earlier results."""
        return write_trace_results(
            self.rows,
            self.windows,
            self.occupancy,
            protocol,
            self.timings,
            out,
            tensorboard=run.tensorboard,
            cpu_timings=self.cpu,
            method_settings=settings,
            earlier=earlier,
        )


def window_record(name: str, window: int, jobs, scored, rep, secs: float, gpus: int) -> dict:
    """One method's replay of one window, as the report's per-window row: jobs scored, replay seconds, decision
    times (p50 / p99 ms) and GPU utilisation over the window's span."""
    span = max(float(np.nanmax(np.r_[rep.occupancy_t, jobs.submit])) - float(jobs.submit.min()), 1.0)
    return {
        "method": name,
        "window": window,
        "jobs": int(scored.sum()),
        "replay_s": secs,
        "decisions": rep.n_decisions,
        "decision_ms_p50": float(np.percentile(rep.decision_s, 50) * 1e3),
        "decision_ms_p99": float(np.percentile(rep.decision_s, 99) * 1e3),
        "gpu_utilisation": float(rep.gpu_seconds.sum() / (gpus * span)),
    }
