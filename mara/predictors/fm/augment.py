"""Curve augmentation for training the flow predictor: time rescaling of whole curves.

A family that learns twice as fast is, to the predictor, the same curve read at twice the speed. ``stretch_ell``
resamples per-batch losses at a factor ``a`` (a > 1: faster, a < 1: slower): ``ell'[i] = ell[floor(i·a)]``,
so the cumulative-average curve L' follows L(a·s) up to rounding. Shapes: ``R`` curves, ``N`` stored batches.
"""

from __future__ import annotations

import dataclasses

import numpy as np

from mara.curves.bank import CurveBank


def stretch_ell(ell: np.ndarray, lengths: np.ndarray, factors: np.ndarray, width: int | None = None):
    """Per-batch losses ell [R, N] (NaN-padded), lengths [R], factors [R] > 0 -> (ell' [R, width], lengths' [R]).

    New length ⌊len/a⌋ capped at ``width`` (default N) and at least 1."""
    ell = np.asarray(ell, np.float64)
    lengths = np.asarray(lengths, np.int64)
    a = np.asarray(factors, np.float64)
    W = ell.shape[1] if width is None else int(width)
    new_len = np.clip(np.floor(lengths / a).astype(np.int64), 1, W)
    i = np.arange(W)[None, :]
    src = np.minimum(np.floor(i * a[:, None]).astype(np.int64), (lengths - 1)[:, None])
    out = np.take_along_axis(ell, src, axis=1)
    return np.where(i < new_len[:, None], out, np.nan), new_len


def stretched_bank(bank: CurveBank, rows: np.ndarray, factors: np.ndarray) -> CurveBank:
    """A new in-memory bank holding ``rows`` of ``bank`` time-rescaled by ``factors`` (same row order)."""
    rows = np.asarray(rows)
    ell, lengths = stretch_ell(bank.ell[rows], bank.lengths[rows], factors)
    take = lambda a: a[rows]
    return dataclasses.replace(
        bank,
        curve_id=take(bank.curve_id),
        family=take(bank.family),
        split=take(bank.split),
        data_source=take(bank.data_source),
        batch_size=take(bank.batch_size),
        lr=take(bank.lr),
        seed=take(bank.seed),
        lengths=lengths,
        ell=ell,
        meta=[bank.meta[r] for r in rows],
    )


def draw_stretch(n: int, rng: np.random.Generator, p: float, lo: float, hi: float) -> np.ndarray:
    """Factors [n]: 1 with probability 1−p, else log-uniform in [lo, hi]."""
    a = np.exp(rng.uniform(np.log(lo), np.log(hi), size=n))
    return np.where(rng.random(n) < p, a, 1.0)
