"""Training examples for the flow predictor from the curve bank, and the Lightning DataModule.

An example is (curve, prefix of n ≥ 4 observations on the obs_every grid, horizon within the stored
suffix) → history features [H, 4], static context [4], 32-bin target y [K] (Eq. 4–5).
Shapes: ``E`` examples, ``H`` padded history, ``K`` bins.
"""

from __future__ import annotations

from dataclasses import dataclass

import lightning as L
import numpy as np
import torch
from torch.utils.data import DataLoader, Dataset

from mara.curves.bank import CurveBank
from mara.predictors.fm.augment import draw_stretch, stretched_bank
from mara.predictors.fm.targets import DELTA, bin_edges, interp_C, interval_targets
from mara.predictors.prefix import history_features, observe, static_context, true_remaining


@dataclass
class Examples:
    rows: np.ndarray  # [E]
    n_obs: np.ndarray  # [E]
    horizon_batches: np.ndarray  # [E]
    x: np.ndarray  # [E, H, 4]
    static: np.ndarray  # [E, 4]
    y: np.ndarray  # [E, K]


def make_examples(
    bank: CurveBank,
    rows: np.ndarray,
    n: int,
    rng: np.random.Generator,
    obs_every: int = 10,
    n_bins: int = 32,
    prefix_max_frac: float = 0.6,
    p_full_horizon: float = 0.5,
    min_horizon_batches: int = 32,
    delta: float = DELTA,
    feature_set: str = "v1",
) -> Examples:
    """Sample n (curve, prefix, horizon) examples; full-suffix horizons (what inference queries) with prob p_full."""
    r = rng.choice(np.asarray(rows), size=n)
    length = bank.lengths[r]
    n_max = np.maximum(
        4, np.floor(np.minimum(prefix_max_frac * length, length - min_horizon_batches) / obs_every)
    ).astype(np.int64)
    n_obs = rng.integers(4, n_max + 1)
    s0 = n_obs * obs_every
    suffix = length - s0
    h_rand = rng.integers(np.minimum(min_horizon_batches, suffix), suffix + 1)
    h_b = np.where(rng.random(n) < p_full_horizon, suffix, h_rand)
    bs = bank.batch_size[r].astype(np.float64)
    S, Lh = observe(bank, r, n_obs, obs_every)
    L0 = bank.L[r, s0 - 1]
    edges = bin_edges(s0 * bs, h_b * bs, n_bins)
    C_rows = bank.C_samples[r]
    C_edges = interp_C(np.nan_to_num(C_rows), bs, edges)
    y = interval_targets(C_edges, edges, L0, delta)
    return Examples(
        r,
        n_obs,
        h_b,
        history_features(S, Lh, n_obs, bs, feature_set),
        static_context(bs, bank.lr[r], L0, h_b * bs, feature_set, S, Lh, n_obs),
        y,
    )


class ExampleDataset(Dataset):
    """Tensors of an ``Examples`` set; validation items also carry fixed flow noise z0 and time u."""

    def __init__(self, ex: Examples, fixed_noise_seed: int | None = None):
        self.x = torch.from_numpy(ex.x.astype(np.float32))
        self.lengths = torch.from_numpy(ex.n_obs)
        self.static = torch.from_numpy(ex.static.astype(np.float32))
        self.y = torch.from_numpy(ex.y.astype(np.float32))
        g = torch.Generator().manual_seed(fixed_noise_seed if fixed_noise_seed is not None else 0)
        self.fixed = fixed_noise_seed is not None
        self.z0 = torch.randn(self.y.shape, generator=g)
        self.u = torch.rand(self.y.shape[0], generator=g)

    def __len__(self):
        return self.y.shape[0]

    def __getitem__(self, i):
        item = {"x": self.x[i], "lengths": self.lengths[i], "static": self.static[i], "y": self.y[i]}
        if self.fixed:
            item.update(z0=self.z0[i], u=self.u[i])
        return item


def collate(items):
    """Stack items, trimming the padded history to the longest in the batch."""
    H = int(max(int(it["lengths"]) for it in items))
    out = {k: torch.stack([it[k] for it in items]) for k in items[0] if k != "x"}
    out["x"] = torch.stack([it["x"][:H] for it in items])
    return out


def val_queries(
    bank: CurveBank, rows: np.ndarray, n_per_curve: int, seed: int, obs_every: int = 10, prefix_max_frac: float = 0.5
):
    """Deterministic (row, n_obs, ε) queries for monitoring MAE; ε = L at a random later batch × U[0.95, 1.05]."""
    rng = np.random.default_rng(seed)
    r = np.repeat(np.asarray(rows), n_per_curve)
    length = bank.lengths[r]
    n_obs = rng.integers(4, np.floor(prefix_max_frac * length / obs_every).astype(np.int64) + 1)
    s0 = n_obs * obs_every
    t = rng.integers(s0 + 1, length + 1)
    eps = bank.L[r, t - 1] * rng.uniform(0.95, 1.05, size=len(r))
    keep = bank.L[r, s0 - 1] > eps
    return r[keep], n_obs[keep], eps[keep]


def remaining_mae(predictor, bank: CurveBank, queries, obs_every: int = 10) -> float:
    """Capped remaining-batch MAE of a predictor on (rows, n_obs, eps) queries."""
    rows, n_obs, eps = queries
    S, Lh = observe(bank, rows, n_obs, obs_every)
    truth, cap = true_remaining(bank, rows, n_obs, eps, obs_every)
    pred = predictor.predict_remaining(S, Lh, n_obs, eps, cap, bank.batch_size[rows], bank.lr[rows])
    return float(np.abs(pred - truth).mean())


class CurveDataModule(L.LightningDataModule):
    """fm_train examples resampled every epoch (seed + epoch); a fixed validation set from fm_val."""

    def __init__(
        self,
        bank: CurveBank,
        seed: int = 0,
        batch_size: int = 256,
        train_examples: int = 16384,
        val_examples: int = 2048,
        obs_every: int = 10,
        n_bins: int = 32,
        prefix_max_frac: float = 0.6,
        p_full_horizon: float = 0.5,
        min_horizon_batches: int = 32,
        val_queries_per_curve: int = 8,
        num_workers: int = 0,
        families=None,
        feature_set: str = "v1",
        stretch_p: float = 0.0,
        stretch_range=(0.5, 2.0),
    ):
        super().__init__()
        self.bank, self.seed = bank, int(seed)
        self.batch_size, self.train_examples, self.val_examples = (
            int(batch_size),
            int(train_examples),
            int(val_examples),
        )
        self.kw = dict(
            obs_every=obs_every,
            n_bins=n_bins,
            prefix_max_frac=prefix_max_frac,
            p_full_horizon=p_full_horizon,
            min_horizon_batches=min_horizon_batches,
            feature_set=feature_set,
        )
        self.stretch_p, self.stretch_range = float(stretch_p), tuple(float(v) for v in stretch_range)
        fam_ok = np.isin(bank.family, list(families)) if families is not None else np.ones(len(bank), bool)
        self.train_rows = np.flatnonzero((bank.split == "fm_train") & fam_ok)
        self.val_rows = np.flatnonzero((bank.split == "fm_val") & fam_ok)
        if len(self.train_rows) == 0 or len(self.val_rows) == 0:
            raise ValueError(f"curve bank {bank.path}: needs fm_train and fm_val curves for the flow predictor")
        self.num_workers = int(num_workers)
        self.val_set = make_examples(
            bank, self.val_rows, self.val_examples, np.random.default_rng([self.seed, 1]), **self.kw
        )
        self.val_q = val_queries(bank, self.val_rows, val_queries_per_curve, seed=self.seed + 2, obs_every=obs_every)
        # standardisation stats from a fixed training draw (identical on every DDP rank)
        ref = make_examples(
            bank, self.train_rows, self.train_examples, np.random.default_rng([self.seed, 0]), **self.kw
        )
        valid = np.arange(ref.x.shape[1])[None, :] < ref.n_obs[:, None]
        xs = ref.x[valid]
        self.stats = {
            "hist": (xs.mean(0), xs.std(0)),
            "static": (ref.static.mean(0), ref.static.std(0)),
            "target": (ref.y.mean(0), ref.y.std(0)),
        }

    def train_examples_for_epoch(self, epoch: int) -> tuple[CurveBank, Examples]:
        """The epoch's training examples and the bank their ``rows`` index (time-stretched copies of the
        fm_train curves when ``stretch_p`` > 0; the unstretched bank otherwise)."""
        rng = np.random.default_rng([self.seed, 100, epoch])
        bank, rows = self.bank, self.train_rows
        if self.stretch_p > 0:
            factors = draw_stretch(
                len(rows), np.random.default_rng([self.seed, 200, epoch]), self.stretch_p, *self.stretch_range
            )
            bank, rows = stretched_bank(self.bank, rows, factors), np.arange(len(rows))
        return bank, make_examples(bank, rows, self.train_examples, rng, **self.kw)

    def train_dataloader(self):
        epoch = self.trainer.current_epoch if self.trainer is not None else 0
        _, ex = self.train_examples_for_epoch(epoch)
        return DataLoader(
            ExampleDataset(ex),
            batch_size=self.batch_size,
            shuffle=True,
            collate_fn=collate,
            num_workers=self.num_workers,
            generator=torch.Generator().manual_seed(self.seed + epoch),
        )

    def val_dataloader(self):
        return DataLoader(
            ExampleDataset(self.val_set, fixed_noise_seed=self.seed + 3),
            batch_size=1024,
            shuffle=False,
            collate_fn=collate,
            num_workers=self.num_workers,
        )
