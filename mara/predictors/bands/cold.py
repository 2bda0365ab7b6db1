"""Remaining-demand estimates for cold tasks (fewer observations than the FM needs) from what is known at arrival.

A task's kind (its family), its target ε and its first 1–3 observations select the ``k`` training curves of that
family closest to the observations (mean |Δ log L| at the observed batches) among those that have not crossed ε yet;
the band is the quantiles of their remaining batches to ε (capped). A family without training curves, or a task
with no family given, keeps the uninformative estimate (the cap), as before.
Shapes: ``B`` tasks, ``H`` history, ``Q`` quantiles, ``n`` a family's curves × ``N`` batches.
"""

from __future__ import annotations

import numpy as np

from mara.predictors.bands.conformal import DEFAULT_QUANTILES


class ColdPrior:
    """Per-family nearest-curve quantiles of the remaining batches (``k`` nearest of the family's curves)."""

    def __init__(self, curves: dict, k: int = 10, quantiles=DEFAULT_QUANTILES):
        self.curves = {str(f): np.asarray(L, np.float64) for f, L in curves.items()}  # {family: L [n, N], nan-padded}
        self.k, self.quantiles = int(k), tuple(float(q) for q in quantiles)

    @classmethod
    def from_bank(cls, bank, split: str = "fm_train", k: int = 10, quantiles=DEFAULT_QUANTILES) -> "ColdPrior":
        """The ``split`` curves of every family that has some (nan past each curve's length)."""
        curves = {}
        for f in np.unique(bank.family):
            rows = bank.rows(f, split)
            if len(rows):
                L = bank.L[rows].astype(np.float64)
                L[np.arange(L.shape[1])[None, :] >= bank.lengths[rows][:, None]] = np.nan
                curves[str(f)] = L
        return cls(curves, k, quantiles)

    def predict_quantiles(self, S, L, lengths, eps, cap_remaining, batch_size, family) -> np.ndarray:
        """[B, Q] ordered remaining batches; rows of an unknown family (or ``family`` None) get the cap everywhere."""
        cap = np.asarray(cap_remaining, np.float64)
        out = np.repeat(cap[:, None], len(self.quantiles), axis=1)
        if family is None:
            return out
        S, L, lengths = np.asarray(S, np.float64), np.asarray(L, np.float64), np.asarray(lengths, np.int64)
        bs = np.asarray(batch_size, np.float64)
        for i, f in enumerate(np.asarray(family)):
            Lc = self.curves.get(str(f))
            if Lc is None:
                continue
            n = int(lengths[i])
            s = np.rint(S[i, :n] / bs[i]).astype(np.int64)  # observed batches 1..
            s0 = int(s[-1]) if n else 0
            idx = np.clip(s - 1, 0, Lc.shape[1] - 1)
            with np.errstate(invalid="ignore", divide="ignore"):
                d = (
                    np.nanmean(np.abs(np.log(Lc[:, idx]) - np.log(L[i, :n])[None, :]), axis=1)
                    if n
                    else np.zeros(len(Lc))
                )
            hit = Lc <= eps[i]
            first = np.where(hit.any(1), hit.argmax(1) + 1, np.iinfo(np.int64).max // 2)
            rem = np.minimum(first - s0, cap[i]).astype(np.float64)
            ok = (first > s0) & np.isfinite(d)  # curves consistent with "not crossed yet"
            if not ok.any():
                continue
            near = np.flatnonzero(ok)[np.argsort(d[ok], kind="stable")[: self.k]]
            out[i] = np.quantile(rem[near], self.quantiles)
        return out
