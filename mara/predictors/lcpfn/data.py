"""Curves as LC-PFN reads them, and its training batches (prior curves; the bank's training curves).

LC-PFN models increasing curves in [0, 1] over a fixed horizon of m epochs. A task's loss prefix becomes one:
time t = s / T with s the batches processed and T = s_now + cap_remaining the task's horizon (its generation cap),
and y = 1 − L / L_max with L the cumulative-average loss and L_max the largest loss of the observed prefix — so y
starts near 0, rises as the loss falls, and stays ≤ 1 (loss ≥ 0); ε maps to y_ε = 1 − ε / L_max. Prior curves are
drawn on the grid x = m·j/G (j = 1..G, m = 100 as in the paper), t = j / G, with G like the bank's observation counts.

A batch (``CurveBatch``) holds G points per curve; the first ``n`` are context, the rest are the targets the loss
reads (``target``). Shapes: ``B`` curves, ``G`` points.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np
import torch

from mara.curves.bank import CurveBank
from mara.predictors.lcpfn.prior import sample_curves
from mara.predictors.prefix import observe

PRIOR_EPOCHS = 100  # the paper's m: prior curves are functions of epochs 1..m


def normalise_prefix(S, L, lengths, cap_remaining, batch_size):
    """(t [B, H], y [B, H], valid [B, H] bool, L_max [B], T [B] batches) of observed prefixes (module docstring)."""
    S, L = np.asarray(S, np.float64), np.asarray(L, np.float64)
    lengths = np.asarray(lengths, np.int64)
    valid = np.arange(S.shape[1])[None, :] < lengths[:, None]
    s = S / np.asarray(batch_size, np.float64)[:, None]
    s_now = s[np.arange(len(s)), lengths - 1]
    T = s_now + np.asarray(cap_remaining, np.float64)
    L_max = np.where(valid, L, -np.inf).max(axis=1)
    t = np.where(valid, s / T[:, None], 0.0)
    y = np.where(valid, 1.0 - L / L_max[:, None], 0.0)
    return t, y, valid, L_max, T


@dataclass
class CurveBatch:
    t: torch.Tensor  # [B, G] times in (0, 1]
    y: torch.Tensor  # [B, G] values
    n_ctx: torch.Tensor  # [B] context points (the first n_ctx)
    exists: torch.Tensor  # [B, G] bool: the point exists (curves shorter than G are padded)

    @property
    def ctx(self) -> torch.Tensor:
        return torch.arange(self.t.shape[1])[None, :] < self.n_ctx[:, None]

    @property
    def target(self) -> torch.Tensor:
        return self.exists & ~self.ctx


def prior_batch(n: int, rng: np.random.Generator, grid=(60, 72)) -> CurveBatch:
    """``n`` noisy prior curves on one grid of G ~ U{grid} points; context n_ctx ~ U{1..G−1} (the paper's cut)."""
    G = int(rng.integers(grid[0], grid[1] + 1))
    j = np.arange(1, G + 1, dtype=np.float64)
    _, y, _ = sample_curves(n, rng, PRIOR_EPOCHS * j / G)
    n_ctx = rng.integers(1, G, size=n)
    return CurveBatch(
        torch.from_numpy(np.repeat((j / G)[None], n, 0)).float(),
        torch.from_numpy(y).float(),
        torch.from_numpy(n_ctx),
        torch.ones(n, G, dtype=torch.bool),
    )


def bank_batch(
    bank: CurveBank, rows, n: int, rng: np.random.Generator, obs_every: int = 10, ctx_range=(4, 0.6)
) -> CurveBatch:
    """``n`` bank curves (drawn from ``rows``) on their observation grid, normalised by their context's L_max;
    n_ctx ~ U{ctx_range[0] .. ctx_range[1]·G} (the prefixes a scheduler sees: from the 4th observation to past half)."""
    r = np.asarray(rows)[rng.integers(len(rows), size=n)]
    G_r = bank.lengths[r] // obs_every
    S, L = observe(bank, r, G_r, obs_every)
    hi = np.maximum(ctx_range[0] + 1, np.floor(ctx_range[1] * G_r)).astype(np.int64)
    n_ctx = rng.integers(ctx_range[0], np.minimum(hi, G_r - 1) + 1)
    exists = np.arange(S.shape[1])[None, :] < G_r[:, None]
    s = S / bank.batch_size[r][:, None]
    L_max = np.where(np.arange(S.shape[1])[None, :] < n_ctx[:, None], L, -np.inf).max(axis=1)
    t = np.where(exists, s / (G_r * obs_every)[:, None], 0.0)
    y = np.where(exists, 1.0 - L / L_max[:, None], 0.0)
    f = lambda a: torch.from_numpy(np.ascontiguousarray(a)).float()
    return CurveBatch(f(t), f(y), torch.from_numpy(n_ctx), torch.from_numpy(exists))


def batch_nll(net, batch: CurveBatch, n_query: int | None = None, generator: torch.Generator | None = None):
    """Mean negative log-likelihood of the batch's target points given its context; ``n_query``: score a random
    subset of that many target points per curve (cheaper steps, the same expected loss)."""
    target = batch.target
    if n_query is None or n_query >= batch.t.shape[1]:
        idx = torch.arange(batch.t.shape[1]).expand_as(batch.t)
    else:
        score = torch.rand(batch.t.shape, generator=generator) + target.float()  # targets first, in random order
        idx = score.topk(n_query, dim=1).indices
    t_q, y_q, m = batch.t.gather(1, idx), batch.y.gather(1, idx), target.gather(1, idx)
    logits = net(batch.t, batch.y, batch.ctx, t_q)
    return -net.dist.log_prob(logits[m], y_q[m]).mean()
