"""Aggregation of per-episode rows (docs/architecture.md, paper §5.1).

Two-stage averaging: an episode's success rate; the mean over a (task set, load, root[, train seed])
group's episodes; then mean ± sample std over roots (× training seeds). "Average" gives each task set
equal weight per root before the statistics. Values in percent.
"""

from __future__ import annotations

from collections import defaultdict

import numpy as np

DIAGNOSTICS = ("utilization", "queue_full", "waiting", "ready")


def _mean_std(values) -> dict:
    v = np.asarray([x for x in values if x is not None and np.isfinite(x)], dtype=np.float64)
    if len(v) == 0:
        return {"mean": None, "std": None, "n": 0}
    return {"mean": float(v.mean()), "std": float(v.std(ddof=1)) if len(v) > 1 else 0.0, "n": int(len(v))}


def group_means(rows: list[dict], key: str = "success_rate", scale: float = 100.0) -> dict:
    """{(method, task_set, load, root, train_seed): mean over episodes of ``key`` × scale}."""
    acc: dict[tuple, list] = defaultdict(list)
    for r in rows:
        val = r.get(key)
        if val is None or not np.isfinite(val):
            continue
        acc[(r["method"], r["task_set"], r["load"], r["root"], r.get("train_seed"))].append(val * scale)
    return {k: float(np.mean(v)) for k, v in acc.items()}


def summarize(rows: list[dict], key: str = "success_rate", scale: float = 100.0) -> dict:
    """summary[method][task_set | 'Average'][str(load)] = {mean, std, n} over roots (× train seeds)."""
    gm = group_means(rows, key, scale)
    runs: dict[tuple, dict] = defaultdict(dict)  # (method, load, root, seed) -> {task_set: value}
    for (m, ts, load, root, seed), v in gm.items():
        runs[(m, load, root, seed)][ts] = v
    by_cell: dict[tuple, list] = defaultdict(list)
    task_sets_of: dict[str, set] = defaultdict(set)
    for (m, load, root, seed), per_ts in runs.items():
        for ts, v in per_ts.items():
            by_cell[(m, ts, load)].append(v)
            task_sets_of[m].add(ts)
    for (m, load, root, seed), per_ts in runs.items():
        if len(task_sets_of[m]) > 1 and set(per_ts) == task_sets_of[m]:
            by_cell[(m, "Average", load)].append(float(np.mean(list(per_ts.values()))))
    out: dict = {}
    for (m, ts, load), vals in sorted(by_cell.items(), key=lambda kv: (kv[0][0], kv[0][1], kv[0][2])):
        out.setdefault(m, {}).setdefault(ts, {})[f"{load:g}"] = _mean_std(vals)
    return out


def summarize_diagnostics(rows: list[dict]) -> dict:
    """Table 4: per method, mean ± sample std over (task set, load, root) group means of each diagnostic."""
    out: dict = {}
    for key in DIAGNOSTICS:
        scale = 100.0 if key in ("utilization", "queue_full") else 1.0
        gm = group_means(rows, key, scale)
        per_method: dict[str, list] = defaultdict(list)
        for (m, *_), v in gm.items():
            per_method[m].append(v)
        for m, vals in per_method.items():
            out.setdefault(m, {})[key] = _mean_std(vals)
    return out
