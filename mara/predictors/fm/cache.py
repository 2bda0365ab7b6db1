"""Reuse of the flow predictor's policy-independent work across rollouts (PPO speed).

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


class _Rows:
    """Contiguous storage (grown by doubling) of entries whose arrays share one shape signature; when full, the
    oldest row is overwritten (its key leaves ``index``)."""

    def __init__(self, arrays: list[np.ndarray], max_entries: int, index: dict) -> None:
        cap = min(max_entries, 1024)
        self.slabs = [np.empty((cap,) + a.shape[1:], a.dtype) for a in arrays]
        self.keys: list = []
        self.max_entries, self.index, self.next = max_entries, index, 0

    def row_for(self, key) -> int:
        hit = self.index.get(key)
        if hit is not None and hit[0] is self:
            return hit[1]
        if hit is not None:  # the same key stored before with other shapes: forget that entry
            old, r = hit
            old.keys[r] = None
        if len(self.keys) < self.max_entries:
            row = len(self.keys)
            self.keys.append(key)
            if row >= len(self.slabs[0]):
                self.slabs = [np.concatenate([a, np.empty_like(a)]) for a in self.slabs]
        else:
            row = self.next
            if self.keys[row] is not None and self.index.get(self.keys[row], (None,))[0] is self:
                del self.index[self.keys[row]]
            self.keys[row] = key
            self.next = (row + 1) % self.max_entries
        self.index[key] = (self, row)
        return row


class FlowSampleCache:
    """Bounded map: history key -> per-row arrays (for FM: bin edges [K+1], futures L̂ [N, K+1], novelty score).

    Rows live in contiguous arrays, one store per shape signature (e.g. FM settings with 8 or 4 flow samples), so
    ``get`` is one fancy-index per field. ``max_entries`` bounds each store (≈ 2.5 KB per entry at N = 8, K = 32);
    past it the oldest entries are overwritten in turn.
    """

    def __init__(self, max_entries: int = 100_000) -> None:
        if max_entries < 1:
            raise ValueError(f"FM cache max_entries must be >= 1, got {max_entries}")
        self.max_entries = int(max_entries)
        self._index: dict = {}  # key -> (store, row)
        self._stores: dict = {}  # shape signature -> _Rows
        self.hits = 0
        self.misses = 0

    def __len__(self) -> int:
        return len(self._index)

    def __contains__(self, key) -> bool:
        return key in self._index

    def missing(self, keys: list) -> np.ndarray:
        """Indices of ``keys`` not cached (counted as misses; the others as hits)."""
        index = self._index
        miss = [i for i, k in enumerate(keys) if k not in index]
        self.misses += len(miss)
        self.hits += len(keys) - len(miss)
        return np.asarray(miss, dtype=np.int64)

    def put(self, keys: list, *arrays: np.ndarray) -> None:
        """Store row i of every array under ``keys[i]``."""
        arrays = [np.asarray(a) for a in arrays]
        sig = tuple((a.shape[1:], a.dtype.str) for a in arrays)
        store = self._stores.get(sig)
        if store is None:
            store = self._stores[sig] = _Rows(arrays, self.max_entries, self._index)
        rows = [store.row_for(k) for k in keys]
        for slab, a in zip(store.slabs, arrays):
            slab[rows] = a

    def get(self, keys: list) -> tuple[np.ndarray, ...]:
        """The stored arrays of cached ``keys`` (all of one shape signature), each stacked over the keys (copies)."""
        stores, rows = zip(*map(self._index.__getitem__, keys))
        store = stores[0]
        if stores.count(store) != len(stores):
            raise ValueError("FlowSampleCache.get: keys of different shapes in one call")
        rows = np.asarray(rows, dtype=np.int64)
        return tuple(slab[rows] for slab in store.slabs)

    def stats(self) -> dict:
        total = self.hits + self.misses
        return {
            "entries": len(self),
            "hits": self.hits,
            "misses": self.misses,
            "hit_rate": self.hits / total if total else float("nan"),
        }
