"""A relaxed upper bound on the deadlines a trace window's jobs can meet: GPU-time capacity over time intervals.

Any schedule on a pool of G GPUs, elastic or not, with the true iteration counts, must give a met job j (submitted
at a_j, deadline d_j, N_j iterations) at least N_j / e_j GPU-seconds inside [a_j, d_j], where e_j is its best
iterations per GPU-second over its allowed levels (max_g v_g / g); and a job met at all has N_j / v*_j ≤ d_j − a_j
(v*_j its fastest level). So for every interval [a, b] the met jobs whose whole window lies inside it fit in G (b −
a) GPU-seconds. ``capacity_bound`` maximises the number of jobs met under those constraints (CP-SAT, 0/1 per job);
set-up overhead, GPU levels, preemption costs and the jobs of the warm-up are left out, so it is a relaxation: no
schedule meets more. Only the constraints that can bind (the interval's jobs need more than its capacity) are kept.

Arrays ``[J]`` over the jobs bounded.
"""

from __future__ import annotations

import numpy as np

from mara.bounds.cpsat import cp_model, solver
from mara.traces.throughput import LEVELS, job_speeds


def gpu_seconds_needed(work: np.ndarray, tput: np.ndarray, n_gpus: int) -> tuple[np.ndarray, np.ndarray]:
    """(least GPU-seconds [J], least wall seconds [J]) to run ``work`` iterations at throughputs ``tput [J, L]``
    (levels above the pool excluded; inf for a job with no level)."""
    tp = np.where(LEVELS[None, :] <= n_gpus, tput, 0.0)
    per_gpu = (tp / LEVELS[None, :]).max(axis=1)
    fastest = tp.max(axis=1)
    with np.errstate(divide="ignore"):
        return np.where(per_gpu > 0, work / per_gpu, np.inf), np.where(fastest > 0, work / fastest, np.inf)


def capacity_bound(
    submit, deadline, gpu_s, wall_s, n_gpus: int, time_limit_s: float = 60.0
) -> tuple[float, np.ndarray]:
    """(upper bound on the number of jobs met, [J] 0/1 of the best selection found). The bound is the solver's
    proven objective bound (the optimum when it finishes within ``time_limit_s``)."""
    a = np.asarray(submit, dtype=np.float64)
    d = np.asarray(deadline, dtype=np.float64)
    w = np.asarray(gpu_s, dtype=np.float64)
    ok = np.isfinite(w) & (np.asarray(wall_s) <= d - a)
    idx = np.flatnonzero(ok)
    pick = np.zeros(len(a), dtype=np.int64)
    if idx.size == 0:
        return 0.0, pick
    m = cp_model().CpModel()
    x = {int(j): m.NewBoolVar(f"x{j}") for j in idx}
    scale = 1.0  # GPU-seconds as integers: ceil the demand, floor the capacity (the relaxation stays valid)
    starts, ends = np.unique(a[idx]), np.unique(d[idx])
    for s in starts:
        inside = idx[a[idx] >= s]
        for e in ends[ends > s]:
            sel = inside[d[inside] <= e]
            if sel.size == 0:
                continue
            cap = n_gpus * (e - s)
            if w[sel].sum() <= cap:
                continue  # cannot bind
            m.Add(sum(int(np.ceil(w[j] * scale)) * x[int(j)] for j in sel) <= int(np.floor(cap * scale)))
    m.Maximize(sum(x.values()))
    sv = solver(time_limit_s)
    st = sv.Solve(m)
    if st in (cp_model().OPTIMAL, cp_model().FEASIBLE):
        for j, v in x.items():
            pick[j] = int(sv.Value(v))
        return float(sv.BestObjectiveBound()), pick
    return float(idx.size), pick


def window_bound(jobs, scored, n_gpus: int, time_limit_s: float = 60.0) -> tuple[np.ndarray, np.ndarray, float]:
    """The capacity bound of one trace window, as a trace evaluation's bound method computes it: (``met [J]`` 0/1 of
    the best selection found among the scored jobs, ``gpu_s [J]`` the least GPU-seconds of each selected job, the
    proven bound on the number of scored jobs met). Each job runs at its fastest known speed per level (the
    throughput table's or ElasticFlow's), so no scheduler's speeds beat it; the warm-up's jobs are left out."""
    tput = np.maximum(job_speeds(jobs, "table", n_gpus)[0], job_speeds(jobs, "elasticflow", n_gpus)[0])
    idx = np.flatnonzero(scored)
    gs, ws = gpu_seconds_needed(jobs.iterations[idx].astype(np.float64), tput[idx], n_gpus)
    ub, pick = capacity_bound(jobs.submit[idx], jobs.deadline[idx], gs, ws, n_gpus, time_limit_s)
    met = np.zeros(len(scored), dtype=np.int64)
    met[idx] = pick
    gpu_s = np.zeros(len(scored))
    gpu_s[idx] = np.where(pick == 1, gs, 0.0)
    return met, gpu_s, ub
