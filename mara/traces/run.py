"""``python -m mara.evaluate experiment=trace``: every trace scheduler on identical jobs of a trace's windows.

Settings (``trace.*``, conf/experiment/trace.yaml): the CSV, the cluster spec, the scheduling slot, the windows (or
the first N jobs), the deadline factor of raw traces, rigid or elastic jobs. Every method sees the same jobs; the
results are one row per method × window × job (``deadline_met`` 0/1) in ``results.json``, and ``results.md`` with
the operator's tables (docs/traces.md). The folder's results merge by method (mara/traces/report.py): the rows of
methods this run does not list stay, and a listed method already replayed there with the same settings on the same
protocol is reused (``eval.resume``, default true).
"""

from __future__ import annotations

import time
from dataclasses import dataclass
from pathlib import Path
from types import SimpleNamespace

import numpy as np
from omegaconf import DictConfig

from mara.core.config import (
    ConfigError,
    available_methods,
    load_method_cfg,
    plain_config,
)
from mara.core.registry import import_object
from mara.traces.replay import JobState, replay
from mara.traces.report import EarlierTrace, earlier_trace_results, write_trace_results
from mara.traces.schema import (
    SHIPPED_SAMPLE,
    SIZE_CLASSES,
    Cluster,
    Trace,
    Window,
    load_trace,
    make_windows,
    parse_cluster,
    size_class,
    window_jobs,
)
from mara.traces.throughput import job_speeds, known_models


@dataclass(frozen=True)
class TraceSettings:
    """``trace.*`` checked: what a trace run replays and how."""

    path: str
    cluster: Cluster
    slot: int = 60
    first_jobs: int | None = None
    window_s: int | None = None
    warmup_s: int = 0
    windows: int = 1
    val_windows: int = 0
    split: str = "eval"
    deadline_factor: float = 1.5
    rigid: bool = False
    overhead: bool = True
    time_limit_s: float | None = None
    jobs: str = "iterations"  # iterations: schedulers told num_iteration | target_loss: jobs stop at a target loss
    target_seed: int = 0


def _int(where, v, lo, allow_none=False):
    if v is None and allow_none:
        return None
    if isinstance(v, bool) or not isinstance(v, (int, float)) or v != int(v) or int(v) < lo:
        raise ConfigError(f"{where} must be an integer >= {lo}{' or null' if allow_none else ''}, got {v!r}")
    return int(v)


def trace_settings(cfg: DictConfig) -> TraceSettings:
    """The checked ``trace.*`` settings (one-line ConfigError)."""
    tc = plain_config(cfg.get("trace")) or {}
    path = tc.get("path") or str(SHIPPED_SAMPLE)
    split = tc.get("split", "eval")
    if split not in ("eval", "val"):
        raise ConfigError(f"trace.split must be eval or val, got {split!r}")
    factor = tc.get("deadline_factor", 1.5)
    if isinstance(factor, bool) or not isinstance(factor, (int, float)) or factor <= 0:
        raise ConfigError(f"trace.deadline_factor must be a number > 0, got {factor!r}")
    jobs = tc.get("jobs", "iterations")
    if jobs not in ("iterations", "target_loss"):
        raise ConfigError(f"trace.jobs must be iterations or target_loss, got {jobs!r}")
    tl = tc.get("time_limit_s")
    if tl is not None and (isinstance(tl, bool) or not isinstance(tl, (int, float)) or tl <= 0):
        raise ConfigError(f"trace.time_limit_s must be a number > 0 or null, got {tl!r}")
    return TraceSettings(
        path=str(path),
        cluster=parse_cluster(tc.get("cluster", "n64g8")),
        slot=_int("trace.slot", tc.get("slot", 60), 1),
        first_jobs=_int("trace.first_jobs", tc.get("first_jobs"), 1, True),
        window_s=_int("trace.window_s", tc.get("window_s"), 1, True),
        warmup_s=_int("trace.warmup_s", tc.get("warmup_s", 0), 0),
        windows=_int("trace.windows", tc.get("windows", 1), 1),
        val_windows=_int("trace.val_windows", tc.get("val_windows", 0), 0),
        split=split,
        deadline_factor=float(factor),
        rigid=bool(tc.get("rigid", False)),
        overhead=bool(tc.get("overhead", True)),
        time_limit_s=None if tl is None else float(tl),
        jobs=jobs,
        target_seed=_int("trace.target_seed", tc.get("target_seed", 0), 0),
    )


def is_trace_bound(mc: DictConfig) -> bool:
    """A bound computed over trace windows (``kind: bound``, ``trace_only``): its ``compute`` takes a window's jobs."""
    return mc.get("kind") == "bound" and bool(mc.get("trace_only"))


def trace_methods(cfg: DictConfig) -> list[tuple[str, DictConfig]]:
    """``[(name, trace scheduler config)]`` of ``methods`` (a trace bound: its method config); a method without a
    trace scheduler is a ConfigError."""
    methods = list(cfg.get("methods") or [])
    if not methods:
        raise ConfigError("methods is empty: name at least one trace scheduler, e.g. 'methods=[EDF,ElasticFlow]'")
    out, usable = [], []
    for m in available_methods():
        try:
            if load_method_cfg(m).get("trace_scheduler") or is_trace_bound(load_method_cfg(m)):
                usable.append(m)
        except Exception:  # a method config that does not compose is reported when it is asked for
            continue
    for m in methods:
        if m not in usable:
            raise ConfigError(f"method {m!r} does not schedule job traces; trace schedulers: {', '.join(usable)}")
        mc = load_method_cfg(m, (plain_config(cfg.get("method_overrides")) or {}).get(m))
        if is_trace_bound(mc):
            limit = mc.get("time_limit_s")
            if isinstance(limit, bool) or not isinstance(limit, (int, float)) or not limit > 0:
                raise ConfigError(f"method {m!r}: time_limit_s must be a positive number of seconds, got {limit!r}")
            out.append((m, mc))
            continue
        spec = mc.trace_scheduler
        ckpt = spec.get("ckpt_path")
        if ckpt and not Path(str(ckpt)).is_file():  # a learned trace scheduler's checkpoint, checked before any work
            raise ConfigError(f"method {m!r}: trace_scheduler.ckpt_path {ckpt} not found")
        rv = spec.get("reserve")
        if rv is not None and (isinstance(rv, bool) or not isinstance(rv, int) or rv < 0):  # the allocator's setting
            raise ConfigError(f"method {m!r}: trace_scheduler.reserve must be an integer >= 0 or null, got {rv!r}")
        out.append((m, spec))
    return out


def check_trace_run(cfg: DictConfig) -> tuple[TraceSettings, Trace, list, list]:
    """Everything a trace run reads, checked before any work: (settings, trace, methods, windows replayed)."""
    ts = trace_settings(cfg)
    methods = trace_methods(cfg)
    trace = load_trace(ts.path, ts.cluster, ts.deadline_factor, known_models())
    windows = make_windows(trace, ts.window_s, ts.warmup_s, ts.windows, ts.val_windows, ts.first_jobs)
    return ts, trace, methods, [w for w in windows if w.split == ts.split]


def build_scheduler(spec: DictConfig, overhead: bool, gpus_per_node: int | None = None):
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


def replay_window(trace: Trace, w: Window, ts: TraceSettings, spec: DictConfig):
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
    if trace.schema == "raw":
        protocol["deadline_factor"] = ts.deadline_factor
    return protocol


def method_settings(methods: list[tuple[str, DictConfig]]) -> dict:
    """{method: the trace settings its rows depend on}: its ``trace_scheduler`` block as replayed."""
    return {name: {"trace_scheduler": plain_config(spec)} for name, spec in methods}


def resumes(cfg: DictConfig) -> bool:
    """``eval.resume`` (default true): reuse a listed method's rows replayed in the folder with the same settings."""
    return (cfg.get("eval") or {}).get("resume", True) is not False


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


def run_trace(cfg: DictConfig, out: Path, log=print) -> dict:
    """The trace experiment: every method on every window; writes results.json / results.md / figure / TensorBoard."""
    ts, trace, methods, windows = check_trace_run(cfg)
    log(
        f"trace {ts.path}: {trace.n_jobs} jobs ({trace.schema} schema), "
        f"cluster {ts.cluster.name} ({ts.cluster.gpus} GPUs), "
        f"{len(windows)} {ts.split} window(s), methods {', '.join(m for m, _ in methods)}"
    )
    protocol, settings = trace_protocol(ts, trace, windows), method_settings(methods)
    earlier = earlier_trace_results(out, protocol, settings, resumes(cfg))
    rows, timings, cpu_timings, windows_info, occupancy = [], {}, {}, [], {}
    for name, spec in methods:
        if reuse(name, earlier, rows, windows_info, timings, cpu_timings, log):
            continue
        timings[name] = cpu_timings[name] = 0.0
        if is_trace_bound(spec):
            timings[name], cpu_timings[name] = bound_windows(name, spec, trace, windows, ts, rows, windows_info, log)
            continue
        for w in windows:
            jobs, scored, rep, secs, cpu = replay_window(trace, w, ts, spec)
            timings[name] += secs
            cpu_timings[name] += cpu
            rows.extend(job_rows(name, w, jobs, scored, rep))
            windows_info.append(window_record(name, w.index, jobs, scored, rep, secs, ts.cluster.gpus))
            if w is windows[0]:
                occupancy[name] = (rep.occupancy_t - rep.occupancy_t[0], rep.occupancy)
            log(
                f"{name} window {w.index}: met {rep.met[scored].mean():.3f} of {int(scored.sum())} jobs in {secs:.1f} s"
            )
    return write_trace_results(
        rows,
        windows_info,
        occupancy,
        protocol,
        timings,
        out,
        tensorboard=bool((cfg.get("eval") or {}).get("tensorboard", True)),
        cpu_timings=cpu_timings,
        method_settings=settings,
        earlier=earlier,
    )


def bound_windows(name: str, mc: DictConfig, trace: Trace, windows, ts: TraceSettings, rows, windows_info, log):
    """A trace bound on every window: its rows (the best selection found, ``deadline_met`` 0/1 per scored job) and
    window records (``bound``: the proven bound on the jobs met) appended; -> (wall seconds, CPU seconds)."""
    compute, secs, cpu = import_object(str(mc.compute)), 0.0, 0.0
    for w in windows:
        jobs, scored = window_jobs(trace, w, ts.first_jobs)
        t0, c0 = time.perf_counter(), time.process_time()
        met, gpu_s, ub = compute(jobs, scored, ts.cluster.gpus, float(mc.time_limit_s))
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
