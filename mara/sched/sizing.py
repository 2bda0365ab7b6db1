"""The steps priority rules share: an order over live jobs, then GPUs per job on a pool.

Shapes: ``[J]`` over a trace's jobs, ``[E, K]`` over the batched engine's slots; ``levels [L]`` ascending GPU counts.
"""

from __future__ import annotations

import numpy as np


def by_keys(keys: tuple, jobs: np.ndarray) -> np.ndarray:
    """``jobs`` [n] sorted by ``keys`` (most significant first, each ``[J]``), ties by job index."""
    return jobs[np.lexsort((jobs, *(k[jobs] for k in reversed(keys))))]


def first_by_keys(keys: tuple, present: np.ndarray, n: int) -> np.ndarray:
    """The (up to) ``n`` present slots of each row in ``keys`` order (most significant first, each ``[E, K]``), ties
    by slot, as ``[E, n]`` slot indices (-1 where fewer are present)."""
    E, K = present.shape
    big = np.finfo(np.float64).max
    if len(keys) == 1:
        order = np.argsort(np.where(present, keys[0].astype(np.float64), big), axis=1, kind="stable")
    else:
        masked = [np.where(present, k.astype(np.float64), big) for k in keys]
        order = np.lexsort(masked[::-1], axis=1)
    m = min(n, K)
    order = order[:, :m]
    out = np.full((E, n), -1, dtype=np.int64)
    out[:, :m] = np.where(np.take_along_axis(present, order, axis=1), order, -1)
    return out


def greedy_levels(max_gpus: np.ndarray, levels: np.ndarray, n_gpus: int) -> np.ndarray:
    """GPUs per job in the order given (``max_gpus [n]``: each job's largest allowed count): a job gets its largest
    count, at most the pool, when that many are free, else the largest level that fits the GPUs still free, else 0.
    One GPU per job (``levels == [1]``) serves the first ``n_gpus`` jobs."""
    n = max_gpus.size
    head = np.minimum(max_gpus[:n_gpus], levels[levels <= n_gpus][-1])  # each job served takes a GPU at least
    gpus = np.zeros(n, dtype=np.int64)
    fit = levels.tolist()
    free = n_gpus
    for i, want in enumerate(head.tolist()):
        if free == 0:
            break
        g = want if free >= want else max(lv for lv in fit if lv <= free)
        gpus[i] = g
        free -= g
    return gpus
