"""Hash every job's outcome of trace rules, to check that a speed-up leaves outcomes unchanged.

    python scripts/trace_outcome_digest.py CSV CLUSTER FIRST_JOBS METHOD [METHOD ...]   # FIRST_JOBS 0: whole trace

Prints per method: deadline-met ratio, decisions, a sha256 prefix over every job's met / declined / finish / start /
GPU seconds and the occupancy trace, and the replay's wall seconds. Run it on two trees (e.g. with PYTHONPATH set to
an exported copy of another commit) and compare the digests.
"""

from __future__ import annotations

import hashlib
import sys
import time

import numpy as np

from mara.core.config import load_method_cfg
from mara.traces.replay import JobState, replay
from mara.traces.run import build_scheduler, size_class
from mara.traces.schema import load_trace, parse_cluster
from mara.traces.throughput import job_speeds, known_models


def main(argv: list[str]) -> None:
    """Replay each method and print its outcome digest."""
    if len(argv) < 4:
        sys.exit(__doc__)
    path, cluster, first = argv[0], argv[1], int(argv[2])
    cl = parse_cluster(cluster)
    whole = load_trace(path, cl, known_models=known_models())
    for m in argv[3:]:
        tr = whole.take(slice(0, first)) if first else whole
        sched = build_scheduler(load_method_cfg(m).trace_scheduler, True, cl.gpus_per_node)
        tput, ml = job_speeds(tr, sched.caps, cl.gpus)
        st = JobState(tr.submit, tr.deadline, tput, ml, tr.iterations.copy(), cl.gpus)
        t0 = time.perf_counter()
        rep = replay(st, sched, size_class(tr.num_gpu), 4)
        secs = time.perf_counter() - t0
        h = hashlib.sha256()
        for a in (rep.met, rep.declined, rep.finish, rep.started, rep.gpu_seconds, rep.occupancy_t, rep.occupancy):
            h.update(np.ascontiguousarray(a).tobytes())
        print(
            f"{m} {path.split('/')[-1]} first={first} met={rep.met.mean():.4f} decisions={rep.n_decisions} "
            f"digest={h.hexdigest()[:16]} replay_s={secs:.1f}",
            flush=True,
        )


if __name__ == "__main__":
    main(sys.argv[1:])
