"""Reuse of the flow predictor's policy-independent work across rollouts (issue 22).

The FM estimate of a task depends only on its observed history (the bank curve's loss points up to the n-th
observation), its horizon (batches left to the cap), its target ε and its static attributes; never on the
allocator. Of that, the network part (context vector and the Euler-integrated flow samples) does not depend on ε
either, so ``FlowSampleCache`` keeps it per *observed history*: the key is whatever identifies that history in
the simulator — (bank row, number of observations, cap remaining, observation spacing) — plus the predictor's
sampling setting (flow samples, Euler steps; the Sobol noise is fixed per predictor). The cheap ε-dependent tail
(reconstruction, first crossing, quantiles, band offset) is recomputed on every call from the cached values, so a
hit returns exactly the values the network gave when the entry was filled.

A cache belongs to one curve bank and one predictor (the owner, e.g. ``TrainingEnv``, makes sure of that); live
mode writes losses into the bank as it runs and never uses one.
"""
from __future__ import annotations

import numpy as np


class FlowSampleCache:
    """Bounded map: history key -> (flow samples y [N, K] float32, context vector c [D] float32).

    ``max_entries`` bounds memory (≈ 1.3 KB per entry at N = 8, K = 32, D = 64); past it the oldest entries go.
    """

    def __init__(self, max_entries: int = 200_000) -> None:
        if max_entries < 1:
            raise ValueError(f"FM cache max_entries must be >= 1, got {max_entries}")
        self.max_entries = int(max_entries)
        self._d: dict = {}
        self.hits = 0
        self.misses = 0

    def __len__(self) -> int:
        return len(self._d)

    def __contains__(self, key) -> bool:
        return key in self._d

    def missing(self, keys: list) -> np.ndarray:
        """Indices of ``keys`` not cached (counted as misses; the others as hits)."""
        miss = np.fromiter((k not in self._d for k in keys), dtype=bool, count=len(keys))
        n_miss = int(miss.sum())
        self.misses += n_miss
        self.hits += len(keys) - n_miss
        return np.flatnonzero(miss)

    def put(self, keys: list, y: np.ndarray, c: np.ndarray) -> None:
        """Store rows y [b, N, K] and c [b, D] under ``keys`` (copies, float32)."""
        y = np.ascontiguousarray(y, np.float32)
        c = np.ascontiguousarray(c, np.float32)
        for i, k in enumerate(keys):
            self._d[k] = (y[i].copy(), c[i].copy())
        over = len(self._d) - self.max_entries
        if over > 0:
            for k in list(self._d)[:over]:  # dicts keep insertion order: the oldest go first
                del self._d[k]

    def get(self, keys: list) -> tuple[np.ndarray, np.ndarray]:
        """(y [B, N, K], c [B, D]) float32 for cached ``keys``."""
        vals = [self._d[k] for k in keys]
        return np.stack([v[0] for v in vals]), np.stack([v[1] for v in vals])

    def stats(self) -> dict:
        total = self.hits + self.misses
        return {"entries": len(self), "hits": self.hits, "misses": self.misses,
                "hit_rate": self.hits / total if total else float("nan")}
