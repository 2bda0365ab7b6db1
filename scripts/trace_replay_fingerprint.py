"""One trace replay's outcome in one line per method, and its seconds: the check that a speed change of a trace rule
changed nothing. Prints the deadline-met ratio, the number of decisions, a hash of every job's outcome (met, declined,
finish, first start, GPU seconds) and of the occupancy trace, and the replay's wall and CPU seconds (best of
``--repeats``). Run it with ``PYTHONPATH`` on two checkouts to compare them:

    python scripts/trace_replay_fingerprint.py data_cache/trace_cases/cluster02_first300.csv n64g8 ElasticFlow
    python scripts/trace_replay_fingerprint.py <csv> <cluster> <method> [<method> ...] [--repeats N] [--exact]
        [--first N]
        # --exact: ElasticFlow with exact marginals (every job's trial re-planned after each step)
"""

import argparse
import hashlib
import json
import sys
import time

import numpy as np

from mara.bench.traces import replay_setup
from mara.core.config import ConfigError
from mara.core.registry import method as registered
from mara.traces.replay import replay
from mara.traces.run import size_class
from mara.traces.schema import SIZE_CLASSES, load_trace, parse_cluster
from mara.traces.throughput import known_models


def outcome_hash(rep) -> str:
    """First 16 hex digits of a SHA-256 over every job's outcome arrays and the occupancy trace."""
    h = hashlib.sha256()
    for a in (rep.met, rep.declined, rep.finish, rep.started, rep.gpu_seconds, rep.occupancy_t, rep.occupancy):
        h.update(np.ascontiguousarray(np.nan_to_num(np.asarray(a, dtype=np.float64), nan=-1.0)).tobytes())
    return h.hexdigest()[:16]


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("trace")
    ap.add_argument("cluster")
    ap.add_argument("method", nargs="+")
    ap.add_argument("--repeats", type=int, default=1)
    ap.add_argument("--exact", action="store_true", help="ElasticFlow's exact marginals")
    ap.add_argument("--first", type=int, default=None, help="only the first N jobs by submission time")
    a = ap.parse_args()
    try:
        cl = parse_cluster(a.cluster)
        tr = load_trace(a.trace, cl, known_models=known_models())
        if a.first:
            tr = tr.take(slice(0, a.first))
        specs = {m: registered(m).trace.scheduler for m in a.method}
    except (ConfigError, OSError) as exc:
        print(f"trace_replay_fingerprint: {exc}", file=sys.stderr)
        sys.exit(2)
    for method, spec in specs.items():
        print(json.dumps(fingerprint(a, tr, cl, method, spec)), flush=True)


def fingerprint(a, tr, cl, method: str, spec) -> dict:
    """Replay ``method`` ``a.repeats`` times on ``tr``; its outcome, hashed, and its best replay seconds."""
    best = None
    for _ in range(max(a.repeats, 1)):
        sched, st = replay_setup(tr, cl, spec)
        if a.exact:
            sched.exact_marginals = True
        t0, c0 = time.perf_counter(), time.process_time()
        rep = replay(st, sched, size_class(tr.num_gpu), len(SIZE_CLASSES))
        wall, cpu = time.perf_counter() - t0, time.process_time() - c0
        if best is None or cpu < best[1]:
            best = (wall, cpu)
    return {
        "trace": a.trace,
        "cluster": a.cluster,
        "method": method,
        "jobs": tr.n_jobs,
        "met": round(float(rep.met.mean()), 6),
        "decisions": rep.n_decisions,
        "outcome_sha": outcome_hash(rep),
        "replay_wall_s": round(best[0], 3),
        "replay_cpu_s": round(best[1], 3),
    }


if __name__ == "__main__":
    main()
