"""In-context curves of a task's own family: what the family's already-seen curves say about the remaining batches.

FT-PFN's idea (other runs' curves condition the extrapolation) as summary features for the decision head: for a task
of family F, its observed prefix, target ε and cap, the reference curves of F (the bank's fm_train curves; for a
family the head never trained on, its ``cal`` curves) nearest to the prefix (mean |Δ log L| at the observed batches)
answer "how many batches after s0 did they need" two ways:

- absolute: the first batch at which the reference curve's loss is ≤ ε, minus s0 (0 if it was already there);
- relative: the first batch at which it fell by the task's own remaining factor ε / L_now from its loss at s0.

Both censored at cap + 1 (ε not reached within the reference curve). ``features`` returns, per task,
``[log1p abs q10, log1p abs q50, log1p abs q90, log1p rel q50, log mean distance, has context]`` over the ``k``
nearest; a task whose family has no reference curves (or no family given) gets zeros and ``has context = 0``.
Shapes: ``B`` tasks, ``H`` history, ``R`` a family's reference curves × ``N`` batches; ``N_CONTEXT`` features.
"""

from __future__ import annotations

import numpy as np

N_CONTEXT = 6
QUANTILES = (0.1, 0.5, 0.9)


def running_min(L: np.ndarray, lengths: np.ndarray) -> np.ndarray:
    """Non-increasing envelope of each curve, held at its last value past its length: [R, N] → [R, N]."""
    L = np.where(np.arange(L.shape[1])[None, :] < lengths[:, None], L, np.inf)
    return np.minimum.accumulate(L, axis=1)


def first_below(env: np.ndarray, thr: np.ndarray) -> np.ndarray:
    """First batch (1-based) at which each envelope is ≤ each threshold, N + 1 if never: env [R, N], thr [B, R] →
    [B, R]."""
    if thr.size * env.shape[1] <= 4_000_000:  # a few tasks (the simulator's calls): one comparison, no loop
        return (env[None] > thr[..., None]).sum(-1) + 1  # env non-increasing: entries above thr precede the first
    out = np.empty(thr.shape, np.int64)
    for c in range(env.shape[0]):
        out[:, c] = np.searchsorted(-env[c], -thr[:, c], side="left") + 1
    return out


class FamilyContext:
    """Per-family reference curves (log-loss and envelope) and the ``k``-nearest summary features."""

    def __init__(self, curves: dict, lengths: dict, k: int = 8, rows: dict | None = None):
        self.k = int(k)
        self.logL, self.env, self.lengths, self.rows = {}, {}, {}, {}
        for f, L in curves.items():
            L, n = np.asarray(L, np.float64), np.asarray(lengths[f], np.int64)
            with np.errstate(divide="ignore", invalid="ignore"):
                logL = np.log(np.maximum(L, 1e-12))
            logL[np.arange(L.shape[1])[None, :] >= n[:, None]] = np.nan
            self.logL[str(f)], self.env[str(f)], self.lengths[str(f)] = logL, running_min(L, n), n
            self.rows[str(f)] = np.asarray(rows[f]) if rows is not None else np.full(len(L), -1)

    @classmethod
    def from_banks(cls, banks_splits, k: int = 8) -> "FamilyContext":
        """Reference curves from (bank, split) pairs; a family found in an earlier pair keeps that pair's curves only
        (fm_train first, then ``cal`` curves for the families without training curves). Rows are kept (bank row
        numbers of the first pair, −1 for later pairs) so training can leave a curve out of its own context."""
        curves, lengths, rows = {}, {}, {}
        for i, (bank, split) in enumerate(banks_splits):
            for f in np.unique(bank.family):
                f = str(f)
                r = bank.rows(f, split)
                if f in curves or not len(r):
                    continue
                curves[f], lengths[f] = bank.L[r], bank.lengths[r]
                rows[f] = r if i == 0 else np.full(len(r), -1)
        return cls(curves, lengths, k, rows)

    def features(self, S, L, lengths, eps, cap_remaining, batch_size, family, exclude_rows=None) -> np.ndarray:
        """[B, N_CONTEXT] (module docstring); ``exclude_rows`` [B]: a bank row to leave out of each task's context."""
        S, L = np.asarray(S, np.float64), np.asarray(L, np.float64)
        lengths = np.asarray(lengths, np.int64)
        B = len(lengths)
        out = np.zeros((B, N_CONTEXT))
        if family is None:
            return out
        family = np.asarray(family).astype(str)
        eps, cap = np.asarray(eps, np.float64), np.asarray(cap_remaining, np.float64)
        bs = np.asarray(batch_size, np.float64)
        H = S.shape[1]
        valid = np.arange(H)[None, :] < lengths[:, None]
        s = np.where(valid, np.rint(S / np.maximum(bs, 1e-12)[:, None]), 1).astype(np.int64)  # observed batches
        s0 = s[np.arange(B), lengths - 1]
        with np.errstate(divide="ignore", invalid="ignore"):
            logq = np.log(np.where(valid, np.maximum(L, 1e-12), 1.0))
        L_now = np.exp(logq[np.arange(B), lengths - 1])
        for f in np.unique(family):
            if f not in self.logL:
                continue
            idx = np.flatnonzero(family == f)
            logL, env = self.logL[f], self.env[f]
            R, N = logL.shape
            ref = logL[:, np.clip(s[idx] - 1, 0, N - 1)]  # [R, b, H]
            diff = np.abs(ref - logq[idx][None]) * np.where(valid[idx], 1.0, np.nan)[None]
            with np.errstate(invalid="ignore"), _quiet():
                d = np.nanmean(diff, axis=2).T  # [b, R]
            d[~np.isfinite(d)] = np.inf
            if exclude_rows is not None:
                d[np.asarray(exclude_rows)[idx][:, None] == self.rows[f][None, :]] = np.inf
            k = min(self.k, R)
            near = np.argsort(d, axis=1, kind="stable")[:, :k]  # [b, k]
            dn = np.take_along_axis(d, near, 1)
            ok = np.isfinite(dn)
            has = ok.any(1)
            s0f, capf = s0[idx], cap[idx]
            thr_abs = np.repeat(eps[idx][:, None], R, 1)
            L0_ref = np.exp(logL[:, np.clip(s0f - 1, 0, N - 1)]).T  # [b, R] reference loss at s0
            thr_rel = L0_ref * (eps[idx] / L_now[idx])[:, None]
            rem = []
            for thr in (thr_abs, thr_rel):
                first = first_below(env, np.nan_to_num(thr, nan=-np.inf))
                r = np.clip(first - s0f[:, None], 0, capf[:, None] + 1).astype(np.float64)
                r[first > N] = (capf + 1)[np.nonzero(first > N)[0]]
                rem.append(np.where(ok, np.take_along_axis(r, near, 1), np.nan))
            with _quiet():
                qa = np.nanquantile(rem[0], QUANTILES, axis=1).T  # [b, 3]
                qr = np.nanmedian(rem[1], axis=1)
                dm = np.nanmean(np.where(ok, dn, np.nan), axis=1)
            feats = np.column_stack([np.log1p(qa), np.log1p(qr), np.log(np.maximum(dm, 1e-6)), np.ones(len(idx))])
            out[idx[has]] = np.nan_to_num(feats[has])
        return out


class _quiet:
    """numpy's all-NaN slice warnings off (rows without context are handled by ``has``)."""

    def __enter__(self):
        import warnings

        self._w = warnings.catch_warnings()
        self._w.__enter__()
        warnings.simplefilter("ignore", RuntimeWarning)

    def __exit__(self, *exc):
        return self._w.__exit__(*exc)
