"""The LC-PFN prior's curves as training curves of the decision head: an in-memory bank of synthetic loss curves.

A prior curve (lcpfn_prior: increasing, in [0, 1], a function of epochs 1..100) becomes a cumulative-average loss
curve beside a **template**: an fm_train curve of the bank, drawn at random, which lends the synthetic curve its
family (so ε and budget are drawn from that family's table, as the workload draws them), batch size, lr, length N
and loss level. Batch s = 1..N is epoch x = 1 + 99·(s − 1)/(N − 1), and the noise-free prior curve y is mapped
affinely onto the template's first and last cumulative-average loss:

    L(s) = L_tmpl(1) + (L_tmpl(N) − L_tmpl(1)) · (y(x_s) − y(x_1)) / (y(x_N) − y(x_1))

(LC-PFN's reading y = 1 − L / L_max inverted, with the scale fixed by two anchors instead of one, so that the
family's ε, calibrated on real curves to be reached by about 70 % of tasks, stays about as reachable; one anchor
would put the binary-loss families' ε out of reach of nearly every prior curve). The noise-free curve is used
because the head reads cumulative averages, which are smooth. Curves that rise by less than ``MIN_RISE`` overall
(the affine map would blow up their wiggles) or whose loss falls to ≤ ``MIN_LOSS_FRAC`` of the template's last loss
are drawn again. The per-batch losses are the differences of N·L, so the bank's cumulative average gives back L.
Shapes: ``P`` prior curves, ``N`` batches.
"""

from __future__ import annotations

from pathlib import Path

import numpy as np

from mara.curves.bank import CurveBank
from mara.predictors.lcpfn.prior import sample_curves

MIN_RISE = 0.05  # y(x_N) − y(x_1): below it the curve is almost flat and the affine map amplifies its shape
MIN_LOSS_FRAC = 0.05  # the synthetic loss stays above this share of the template's last loss
PRIOR_EPOCHS_MIN, PRIOR_EPOCHS = 1.0, 100.0  # the paper's epochs 1..m, m = 100
CHUNK = 2048  # prior curves drawn at a time (memory: about 3 × 2·CHUNK × N floats)


def batch_epochs(n_batches: int) -> np.ndarray:
    """[N] the prior's epochs at batches 1..N: 1 + 99·(s − 1)/(N − 1)."""
    s = np.arange(n_batches, dtype=np.float64)
    return PRIOR_EPOCHS_MIN + (PRIOR_EPOCHS - PRIOR_EPOCHS_MIN) * s / max(n_batches - 1, 1)


def anchored_losses(y: np.ndarray, L_first: np.ndarray, L_last: np.ndarray) -> np.ndarray:
    """[P, N] cumulative-average losses: prior curves y [P, N] mapped onto (L_first [P], L_last [P]) (module
    docstring)."""
    rise = y[:, -1:] - y[:, :1]
    frac = (y - y[:, :1]) / rise
    return L_first[:, None] + (L_last - L_first)[:, None] * frac


def per_batch_losses(L: np.ndarray) -> np.ndarray:
    """[P, N] per-batch losses whose cumulative average is ``L`` [P, N]: s·L_s − (s − 1)·L_{s−1}."""
    s = np.arange(1, L.shape[1] + 1, dtype=np.float64)[None, :]
    C = s * L
    return np.diff(C, axis=1, prepend=0.0)


def _curves_like(L_tmpl: np.ndarray, n_batches: int, rng: np.random.Generator) -> np.ndarray:
    """[P, N] anchored synthetic losses for templates with cumulative-average losses ``L_tmpl`` [P, N]."""
    x = batch_epochs(n_batches)
    first, last = L_tmpl[:, 0], L_tmpl[:, n_batches - 1]
    out = np.empty((len(L_tmpl), n_batches))
    todo = np.arange(len(L_tmpl))
    while len(todo):
        now, todo = todo[:CHUNK], todo[CHUNK:]
        y, _, _ = sample_curves(len(now), rng, x)
        L = anchored_losses(y, first[now], last[now])
        ok = (y[:, -1] - y[:, 0] >= MIN_RISE) & (L.min(axis=1) > MIN_LOSS_FRAC * last[now])
        out[now[ok]] = L[ok]
        todo = np.concatenate([todo, now[~ok]])
    return out


def prior_bank(bank: CurveBank, n: int, rng: np.random.Generator, split: str = "fm_train") -> CurveBank:
    """``n`` synthetic curves from the LC-PFN prior beside templates drawn from ``bank``'s ``split`` curves (module
    docstring); every curve has split ``fm_train`` and the bank's family table, so ``decision_examples`` reads it as
    it reads the bank."""
    rows = bank.rows(split=split)
    if len(rows) == 0:
        raise ValueError(f"curve bank {bank.path}: no '{split}' curves to lend the prior's curves a family and scale")
    tmpl = rows[rng.integers(len(rows), size=int(n))]
    N = int(bank.lengths[tmpl].max())
    ell = np.full((len(tmpl), N), np.nan)
    for length in np.unique(bank.lengths[tmpl]):
        i = np.flatnonzero(bank.lengths[tmpl] == length)
        L = _curves_like(bank.L[tmpl[i], :length], int(length), rng)
        ell[i, :length] = per_batch_losses(L)
    return CurveBank(
        path=Path(f"lcpfn-prior:{bank.path}"),
        curve_id=np.array([f"prior-{i}" for i in range(len(tmpl))]),
        family=bank.family[tmpl].copy(),
        split=np.full(len(tmpl), "fm_train"),
        data_source=np.full(len(tmpl), "parametric"),
        batch_size=bank.batch_size[tmpl].copy(),
        lr=bank.lr[tmpl].copy(),
        seed=np.arange(len(tmpl), dtype=np.int64),
        lengths=bank.lengths[tmpl].copy(),
        ell=ell,
        meta=["{}"] * len(tmpl),
        bank_meta={"family_params": bank.family_params},
    )
