"""Trace-replay benchmark rows: replay seconds per scheduler per trace, decision time per slot against cluster size."""

from __future__ import annotations

import time
from pathlib import Path

import numpy as np

from mara.core.config import ConfigError, available_methods
from mara.core.registry import method as registered
from mara.core.registry import methods as registered_methods
from mara.traces.replay import JobState, replay
from mara.traces.run import build_scheduler, size_class
from mara.traces.schema import SHIPPED_SAMPLE, SIZE_CLASSES, TraceError, load_trace, parse_cluster
from mara.traces.throughput import job_speeds, known_models


def replay_setup(tr, cl, spec) -> tuple:
    """A fresh scheduler for the ``trace_scheduler`` block ``spec`` and the job state of trace ``tr`` on cluster
    ``cl``, ready for ``replay``: (scheduler, JobState)."""
    sched = build_scheduler(spec, True, cl.gpus_per_node)
    tput, ml = job_speeds(tr, sched.caps, cl.gpus)
    return sched, JobState(tr.submit, tr.deadline, tput, ml, tr.iterations.copy(), cl.gpus)


def replay_once(path, cluster: str, method: str, first_jobs=None, time_limit=None) -> dict:
    """One replay of ``method`` on a trace: {seconds (wall), cpu_seconds, met, decisions, p50/p99 ms per decision},
    or a time-out note."""
    cl = parse_cluster(cluster)
    tr = load_trace(path, cl, known_models=known_models())
    if first_jobs:
        tr = tr.take(slice(0, int(first_jobs)))
    sched, st = replay_setup(tr, cl, registered(method).trace.scheduler)
    t0, c0 = time.perf_counter(), time.process_time()
    try:
        rep = replay(st, sched, size_class(tr.num_gpu), len(SIZE_CLASSES), time_limit=time_limit)
    except TimeoutError:
        return {"seconds": time.perf_counter() - t0, "cpu_seconds": time.process_time() - c0, "timed_out": True}
    ms = rep.decision_s * 1e3
    return {
        "seconds": time.perf_counter() - t0,
        "cpu_seconds": time.process_time() - c0,
        "met": float(rep.met.mean()),
        "decisions": rep.n_decisions,
        "p50_ms": float(np.percentile(ms, 50)),
        "p99_ms": float(np.percentile(ms, 99)),
        "jobs": tr.n_jobs,
    }


def trace_rules(learned: bool = False) -> dict[str, list[str]]:
    """Every registered method with a trace scheduler, one per distinct scheduler on iteration-count traces:
    ``{method timed: [the other methods that run the same scheduler there]}``. Methods whose blocks differ only in
    ``name`` or in ``trace_count`` (what they are told on target-loss jobs) replay the same on iteration counts, so
    one stands for all: the one not planning on predictions, then the shortest name. ``learned``: keep learned
    policies (their shipped checkpoints) too."""
    groups: dict[str, list[tuple]] = {}
    for m, entry in registered_methods().items():
        spec = entry.trace.scheduler
        if not spec or (entry.learned and not learned):
            continue
        key = repr(sorted((k, v) for k, v in spec.items() if k != "name"))
        groups.setdefault(key, []).append((entry.trace.count == "predicted", len(m), m))
    out = {}
    for members in groups.values():
        names = [m for *_, m in sorted(members)]
        out[names[0]] = names[1:]
    return out


def expand_methods(methods) -> tuple[list[str], dict[str, list[str]]]:
    """``--trace-methods`` → (methods timed, {method: methods it stands for}); ``all`` is every trace rule
    (``trace_rules``), any other name is taken as given."""
    rules = trace_rules()
    unknown = [m for m in methods if m != "all" and m not in available_methods()]
    if unknown:
        raise ConfigError(f"--trace-methods: unknown method {unknown[0]} (all, or one of {', '.join(rules)})")
    out: list[str] = []
    for m in methods:
        for n in list(rules) if m == "all" else [m]:
            if n not in out:
                out.append(n)
    return out, {m: rules.get(m, []) for m in out}


def trace_rows(
    traces,
    methods=("EDF", "ElasticFlow"),
    sizes=(8, 16, 32, 64, 128),
    time_limit=600.0,
    sweep_jobs: int = 100,
    aliases: dict | None = None,
) -> dict:
    """Print and return the trace rows: ``traces`` = [(path, cluster)]; ``sizes``: nodes of 8 GPUs for the
    decision-time sweep on the first ``sweep_jobs`` jobs of the shipped sample; ``aliases``: {method: other methods
    that run the same scheduler}, said beside its row."""
    rec: dict = {"replay": [], "decision_ms": []}
    for path, cluster in traces:
        name = str(path).split(chr(47))[-1]
        total, cpu, over = 0.0, 0.0, False
        for m in methods:
            r = replay_once(path, cluster, m, time_limit=time_limit)
            r.update(trace=str(path), cluster=cluster, method=m, same_as=list((aliases or {}).get(m, [])))
            rec["replay"].append(r)
            total += r["seconds"]
            cpu += r["cpu_seconds"]
            over |= bool(r.get("timed_out"))
            val = f"> {time_limit:.0f} (limit)" if r.get("timed_out") else f"{r['seconds']:.2f}"
            extra = f"  CPU {r['cpu_seconds']:.2f} s"
            extra += "" if r.get("timed_out") else f", met {r['met']:.3f}, {r['decisions']} decisions"
            if r["same_as"]:
                extra += f" (also {', '.join(r['same_as'])})"
            print(f"{f'trace replay {m}, {name} {cluster} (s)':<56}{val:>16}{extra}")
        if len(methods) > 1:
            val = ("> " if over else "") + f"{total:.2f}"
            print(f"{f'trace replay, all {len(methods)} above, {name} (s)':<56}{val:>16}  CPU {cpu:.2f} s")
    for n in sizes:
        for m in methods:
            r = replay_once(SHIPPED_SAMPLE, f"n{n}g8", m, first_jobs=sweep_jobs, time_limit=time_limit)
            r.update(cluster=f"n{n}g8", gpus=8 * n, method=m)
            rec["decision_ms"].append(r)
            if r.get("timed_out"):
                print(f"{f'decision ms {m}, {8 * n} GPUs (p50/p99)':<44}{'time limit':>16}")
            else:
                print(
                    f"{f'decision ms {m}, {8 * n} GPUs (p50/p99)':<44}{r['p50_ms']:>8.2f}/{r['p99_ms']:<7.2f}"
                    f"  {sweep_jobs} sample jobs, {r['decisions']} decisions"
                )
    return rec


def parse_traces(specs) -> list:
    """``["path:n64g8", ...]`` → [(path, cluster)]; none: the shipped sample on n64g8."""
    if not specs:
        return [(str(SHIPPED_SAMPLE), "n64g8")]
    out = []
    for s in specs:
        path, _, cl = str(s).rpartition(":")
        path, cl = (path, cl) if path else (cl, "n64g8")
        parse_cluster(cl)  # a bad spec or a missing file stops here, before any replay
        if not Path(path).is_file():
            raise TraceError(f"--traces {s}: no such trace file {path}")
        out.append((path, cl))
    return out
