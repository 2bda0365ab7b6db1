"""Reuse of the flow predictor's policy-independent work across rollouts (issue 22).

The FM estimate of a task depends only on its observed history (the bank curve's loss points up to the n-th
observation), its horizon (batches left to the cap), its target ε and its static attributes; never on the
allocator. Everything but the last, cheap step does not depend on ε either — the network (context vector, Euler-
integrated flow samples), the reconstructed futures L̂ on the bin edges and the novelty score of the prefix — so
``FlowSampleCache`` keeps those per *observed history*: the key is whatever identifies that history in the
simulator — (bank row, number of observations, cap remaining, observation spacing) — plus the predictor's sampling
setting (flow samples, Euler steps; the Sobol noise is fixed per predictor). The ε-dependent tail (first crossing,
quantiles, band offset, fallback) is recomputed on every call from the cached values, so a hit returns exactly the
values computed when the entry was filled.

A cache belongs to one curve bank and one predictor (the owner, e.g. ``TrainingEnv``, makes sure of that); live
mode writes losses into the bank as it runs and never uses one.
"""
from __future__ import annotations

import numpy as np


class FlowSampleCache:
    """Bounded map: history key -> per-row arrays (for FM: bin edges [K+1], futures L̂ [N, K+1], novelty score).

    ``max_entries`` bounds memory (≈ 2.5 KB per entry at N = 8, K = 32); past it the oldest entries go.
    """

    def __init__(self, max_entries: int = 100_000) -> None:
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

    def put(self, keys: list, *arrays: np.ndarray) -> None:
        """Store row i of every array (copies) under ``keys[i]``."""
        for i, k in enumerate(keys):
            self._d[k] = tuple(np.array(a[i]) for a in arrays)
        over = len(self._d) - self.max_entries
        if over > 0:
            for k in list(self._d)[:over]:  # dicts keep insertion order: the oldest go first
                del self._d[k]

    def get(self, keys: list) -> tuple[np.ndarray, ...]:
        """The stored arrays of cached ``keys``, each stacked over the keys."""
        vals = [self._d[k] for k in keys]
        return tuple(np.stack([v[j] for v in vals]) for j in range(len(vals[0])))

    def stats(self) -> dict:
        total = self.hits + self.misses
        return {"entries": len(self), "hits": self.hits, "misses": self.misses,
                "hit_rate": self.hits / total if total else float("nan")}
