"""Measured job throughput by GPU count, and each job's GPU levels (1, 2, 4, ..., 64).

``mara/data/traces/throughputs_A100.csv`` holds iterations per second of the six trace models on A100 GPUs by
global batch size and GPU count (from the ElasticFlow artifact, Apache-2.0; README beside it). A job runs on a
level of GPUs (a power of two up to 64, as the measurements); its speed is the measured number at that level, never
interpolated. A raw-schema job (no model) does ``duration`` units of work, one per second on ``num_gpu`` GPUs and
proportionally slower on fewer.
"""

from __future__ import annotations

import csv
from functools import lru_cache

import numpy as np

from mara.sched.interface import LEVELS
from mara.traces.schema import SCHEMAS, SHIPPED_DIR, Trace

TABLE = SHIPPED_DIR / "throughputs_A100.csv"

#: per-model GPU caps of ElasticFlow's A100 model profiles: (model, batch size) -> max GPUs; others min(bs, 64)
ELASTICFLOW_MAX_GPU = {
    ("gpt2", 128): 16,
    ("gpt2", 256): 32,
    ("bert", 64): 8,
    ("inception3", 64): 16,
    ("inception3", 128): 32,
    ("resnet50", 64): 32,
    ("vgg16", 64): 32,
}
ELASTICFLOW_MAX_GPU_BY_MODEL = {"bert": 16}  # any other batch size of these models
#: deepspeech2's cap is its batch size (one sample per GPU at least)


@lru_cache(maxsize=1)
def load_table() -> dict:
    """``{(model, batch_size): [L] iters/s}`` over LEVELS (NaN: not measured)."""
    out: dict = {}
    with open(TABLE, newline="") as fh:
        for r in csv.DictReader(fh):
            key = (r["model_name"], int(r["batch_size"]))
            row = out.setdefault(key, np.full(len(LEVELS), np.nan))
            v = r["iters_per_s"].strip()
            row[int(np.searchsorted(LEVELS, int(r["gpus"])))] = float(v) if v else np.nan
    return out


def known_models() -> set:
    """The (model, batch size) pairs with a measured table."""
    return set(load_table())


def _level_at_most(g) -> np.ndarray:
    """Index of the largest level <= g (g >= 1), vectorised."""
    return np.searchsorted(LEVELS, np.asarray(g), side="right") - 1


def job_speeds(trace: Trace, cap_rule: str, cluster_gpus: int, rigid: bool = False) -> tuple[np.ndarray, np.ndarray]:
    """``(tput [J, L] iters/s, 0 where not allowed; max_level [J] index into LEVELS)`` of each job.

    ``cap_rule``: ``"elasticflow"`` (the per-model caps above) or ``"table"`` (the largest measured level, at most the
    batch size: what EDF is given) or ``"trace"`` (rigid: the trace's own ``num_gpu``, what Gandiva, Tiresias and Themis
    are given). ``rigid``: only the trace's own ``num_gpu`` (rounded down to a level)."""
    rigid = rigid or cap_rule == "trace"
    J, L = trace.n_jobs, len(LEVELS)
    tput = np.zeros((J, L))
    cap = np.full(J, 64, dtype=np.int64)
    if not SCHEMAS[trace.schema].per_model:
        tput[:] = LEVELS[None, :] / trace.num_gpu[:, None].astype(np.float64)
        cap = trace.num_gpu.copy()
    else:
        table = load_table()
        for key in set(zip(trace.model, trace.batch_size.tolist())):
            sel = (trace.model == key[0]) & (trace.batch_size == key[1])
            row = np.nan_to_num(table[key], nan=0.0)
            tput[sel] = row
            model, bs = key
            if cap_rule == "elasticflow":
                c = ELASTICFLOW_MAX_GPU.get(key, ELASTICFLOW_MAX_GPU_BY_MODEL.get(model, min(bs, 64)))
                if model == "deepspeech2":
                    c = bs
            else:
                measured = np.flatnonzero(~np.isnan(table[key]))
                c = min(int(LEVELS[measured[-1]]), bs, 64)
            cap[sel] = c
    if rigid:
        cap = np.minimum(cap, trace.num_gpu) if not SCHEMAS[trace.schema].per_model else trace.num_gpu.copy()
    cap = np.clip(cap, 1, min(64, cluster_gpus))
    max_level = _level_at_most(cap)
    allowed = np.arange(L)[None, :] <= max_level[:, None]
    if rigid:
        allowed &= np.arange(L)[None, :] == max_level[:, None]
    tput = np.where(allowed & (tput > 0), tput, 0.0)
    return tput, max_level
