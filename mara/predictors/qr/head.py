"""The decision head: quantiles of the remaining batches to ε, learned by quantile regression.

``QuantileNet`` (plain nn.Module): GRU over the standardised history features + the standardised static vector
(mara/predictors/qr/data.py) → Q non-crossing quantiles of log(1 + remaining batches) (standardised target).
An ensemble (several trained heads, e.g. training seeds) averages the members' quantiles of log(1 + batches) level
by level (stays non-crossing); ``ckpt_path`` may name one file or a list, and one file may hold several members.
``QuantileHeadPredictor`` gives the simulator the same interface as the flow predictor: ``predict_remaining`` (the
0.5 level) and ``predict_quantiles`` → [B, 3] at the configured ``band`` levels (lo, 0.5, hi), each one of the
trained levels, read directly (no extrapolation). Fewer than 4 observations → the cap (cold), as for FM and WLS;
with a ``cold`` prior (``bands/cold.py``) → its nearest-curve quantiles at the same band levels, and NaN (no
estimate) for a family without training curves.

Shapes: ``B`` tasks, ``H`` history, ``Q`` trained levels.
"""

from __future__ import annotations

from pathlib import Path
from typing import Mapping

import numpy as np
import torch
from torch import nn

from mara.core.config import ConfigError, plain_config
from mara.core.safe_load import (
    CheckpointError,
    check_kind,
    load_checkpoint,
    net_from,
    save_net,
)
from mara.curves.bank import SPLITS, default_bank_path, load_bank
from mara.predictors.bands.cold import ColdPrior
from mara.predictors.bands.level_shift import apply_level_shifts, level_shifts
from mara.predictors.factory import shipped_checkpoint
from mara.predictors.fm.nets import HistoryEncoder, Standardizer
from mara.predictors.prefix import query_inputs, untrained_cal
from mara.predictors.qr.data import MIN_OBS, N_STATIC, decision_inputs
from mara.predictors.qr.levels import (
    DEFAULT_LEVELS,
    check_levels,
    level_index,
    monotone_quantiles,
)

SHIFT_BINS = (10, 20)  # n_obs bins of the level shifts: [4, 10), [10, 20), [20, ..) (early prefixes miss most)


class QuantileNet(nn.Module):
    def __init__(
        self,
        levels=DEFAULT_LEVELS,
        gru_hidden: int = 64,
        hidden: int = 128,
        n_hist_features: int = 4,
        n_static: int = N_STATIC,
    ):
        super().__init__()
        self.levels = check_levels(levels)
        self.hist_norm = Standardizer(n_hist_features)
        self.static_norm = Standardizer(n_static)
        self.target_norm = Standardizer(1)
        self.encoder = HistoryEncoder(n_hist_features, gru_hidden)
        self.head = nn.Sequential(
            nn.Linear(gru_hidden + n_static, hidden),
            nn.SiLU(),
            nn.Linear(hidden, hidden),
            nn.SiLU(),
            nn.Linear(hidden, len(self.levels)),
        )

    def forward(self, x: torch.Tensor, lengths: torch.Tensor, static: torch.Tensor) -> torch.Tensor:
        """Raw inputs -> standardised quantiles [B, Q] (non-crossing)."""
        h = self.encoder(self.hist_norm(x), lengths)
        return monotone_quantiles(self.head(torch.cat([h, self.static_norm(static)], dim=-1)))

    def quantiles_log1p(self, x, lengths, static) -> torch.Tensor:
        """Quantiles of log(1 + remaining batches) [B, Q]."""
        return self.target_norm.inverse(self(x, lengths, static))


def default_ckpt_path(bank_path=None) -> Path:
    """``mara/data/checkpoints/qr_<bank>.ckpt``: the shipped head trained on a shipped bank's fm_train curves, else
    (another bank, or a shipped bank without its own head) the default bank's, as for the FM checkpoint."""
    return shipped_checkpoint("qr", bank_path)


def save_head(net: QuantileNet, hparams: Mapping, path, extra: Mapping | None = None) -> Path:
    """One member's checkpoint (kind ``qr``; ``recipe`` in ``extra`` names the command that made it)."""
    return save_net(path, "qr", net, hparams, extra)


def save_ensemble(paths, out) -> Path:
    """One file holding every member checkpoint in ``paths`` (each a ``save_head`` file)."""
    members = [_check_head(load_checkpoint(p, "decision-head checkpoint"), p) for p in paths]
    out = Path(out)
    out.parent.mkdir(parents=True, exist_ok=True)
    torch.save({"kind": "qr", "members": members, "recipe": members[0].get("recipe") if members else None}, out)
    return out


def _check_head(member, path) -> dict:
    if not isinstance(member, dict) or not isinstance(member.get("hparams"), dict) or "state_dict" not in member:
        raise CheckpointError(f"{path} is not a decision-head (qr) checkpoint (no state_dict/hparams)")
    return check_kind(member, path, "qr", ())


def load_heads(paths) -> list[QuantileNet]:
    """The member nets of one checkpoint path or a list of them (a file may hold several members)."""
    nets = []
    for path in [paths] if isinstance(paths, (str, Path)) else list(paths):
        path = Path(path)
        if not path.exists():
            raise FileNotFoundError(
                f"no decision-head checkpoint {path} (train one: python -m mara.predictors.quantile_train)"
            )
        blob = load_checkpoint(path, "decision-head checkpoint")
        members = check_kind(blob, path, "qr", ()).get("members", [blob])
        for m in members if isinstance(members, list) else [None]:
            m = _check_head(m, path)
            nets.append(net_from(QuantileNet, m, path, "a decision-head (qr) checkpoint"))
    if not nets or any(n.levels != nets[0].levels for n in nets):
        raise ValueError("decision-head ensemble: every member must be trained at the same levels")
    return nets


def load_head(path) -> tuple[QuantileNet, dict]:
    nets = load_heads(path)
    return nets[0], {"n_members": len(nets)}


class QuantileHeadPredictor:
    """RemainingPredictor with a band read from learned quantile levels (module docstring)."""

    name = "qr"

    def __init__(self, net, band=(0.1, 0.5, 0.9), min_obs: int = MIN_OBS, cold=None):
        band = check_levels(band)
        if len(band) != 3 or abs(band[1] - 0.5) > 1e-9:
            raise ValueError(f"qr band must be three levels (lo, 0.5, hi), got {list(band)}")
        self.nets = [n.eval() for n in (net if isinstance(net, (list, tuple)) else [net])]
        self.levels = self.nets[0].levels
        self.quantiles = band
        self.band_idx = level_index(self.levels, band)
        self.min_obs = int(min_obs)
        self.cold = cold  # ColdPrior at the band's levels for tasks below min_obs, or None (the cap)
        # {family: [n_bins, 3]} level shifts of the band for families the head never trained on (fit_shifts)
        self.shifts, self.shift_bins = {}, SHIFT_BINS

    @classmethod
    def from_config(cls, cfg, bank_path=None) -> "QuantileHeadPredictor":
        path = cfg.get("ckpt_path") or default_ckpt_path(bank_path)
        if not isinstance(path, (str, Path)):
            path = [str(p) for p in path]
        band = tuple(cfg.get("band", (0.1, 0.5, 0.9)))
        head = cls(
            load_heads(path),
            band=band,
            min_obs=int(cfg.get("min_obs", MIN_OBS)),
            cold=cold_prior_from(cfg.get("cold"), bank_path, band),
        )
        rc = cfg.get("recalibrate")
        if rc:
            head.fit_shifts(
                Path(bank_path or default_bank_path()),
                rc.get("cal_bank", "beside"),
                tuple(rc.get("obs_bins", SHIFT_BINS)),
                int(rc.get("obs_every", 10)),
                int(rc.get("seed", 0)),
            )
        return head

    def fit_shifts(self, bank_path: Path, cal_bank="beside", obs_bins=SHIFT_BINS, obs_every: int = 10, seed: int = 0):
        """Level shifts of the band for the families the head never trained on, fitted on their ``cal`` curves
        (``cal_bank``: ``beside`` = ``<bank>_cal.parquet`` next to the bank, or a path); none when there are none."""
        self.shifts, self.shift_bins = {}, tuple(int(b) for b in obs_bins)
        found = untrained_cal(bank_path, cal_bank, obs_every, seed)
        if found is None:
            return
        cal, q = found
        band = self.all_quantiles(*query_inputs(cal, q, obs_every))
        self.shifts = level_shifts(
            band[:, self.band_idx], q["truth"], self.quantiles, cal.family[q["rows"]], q["n_obs"], self.shift_bins
        )

    def all_quantiles(self, S, L, lengths, eps, cap_remaining, batch_size, lr) -> np.ndarray:
        """Remaining batches at every trained level [B, Q], within [0, cap]; cold tasks (< min_obs) get the cap."""

        lengths, cap = np.asarray(lengths, np.int64), np.asarray(cap_remaining, np.float64)

        def warm_log1p(warm, sub):
            x, st = decision_inputs(sub(S), sub(L), sub(lengths), sub(eps), sub(cap), sub(batch_size), sub(lr))
            return ensemble_log1p(self.nets, x, sub(lengths), st)

        return warm_quantiles(lengths, cap_remaining, self.min_obs, len(self.levels), warm_log1p)

    def predict_quantiles(self, S, L, lengths, eps, cap_remaining, batch_size, lr, family=None) -> np.ndarray:
        """[B, 3] remaining batches at the band levels (lo, 0.5, hi); ordered, within [0, cap]. With a ``cold`` prior,
        tasks below ``min_obs`` get its quantiles (NaN where their family has no training curves)."""
        q = self.all_quantiles(S, L, lengths, eps, cap_remaining, batch_size, lr)[:, self.band_idx]
        if self.shifts:
            warm = np.flatnonzero(np.asarray(lengths) >= self.min_obs)
            sub = lambda a: np.asarray(a)[warm]  # noqa: E731
            q[warm] = apply_level_shifts(
                q[warm],
                None if family is None else sub(family),
                sub(lengths),
                self.shifts,
                self.shift_bins,
                sub(cap_remaining),
            )
        cold = np.flatnonzero(np.asarray(lengths) < self.min_obs)
        if self.cold is None or family is None or not len(cold):
            return q
        sub = lambda a: np.asarray(a)[cold]  # noqa: E731
        fam = sub(family)
        q[cold] = self.cold.predict_quantiles(
            sub(S), sub(L), sub(lengths), sub(eps), sub(cap_remaining), sub(batch_size), fam
        )
        q[cold[~np.isin(fam.astype(str), list(self.cold.curves))]] = np.nan
        return q

    def predict_remaining(self, S, L, lengths, eps, cap_remaining, batch_size, lr, family=None) -> np.ndarray:
        """The learned median [B]."""
        return self.predict_quantiles(S, L, lengths, eps, cap_remaining, batch_size, lr, family=family)[:, 1]


def ensemble_log1p(nets, x, lengths, static) -> np.ndarray:
    """The members' mean log(1 + remaining batches) at every level: history features x [W, H, 4], lengths [W],
    static [W, n] -> [W, Q]."""
    args = (
        torch.from_numpy(x.astype(np.float32)),
        torch.from_numpy(np.asarray(lengths, np.int64)),
        torch.from_numpy(static.astype(np.float32)),
    )
    with torch.inference_mode():
        return np.mean([n.quantiles_log1p(*args).double().numpy() for n in nets], axis=0)


def warm_quantiles(lengths, cap_remaining, min_obs: int, n_levels: int, warm_log1p) -> np.ndarray:
    """Remaining batches [B, Q] within [0, cap]: ``warm_log1p(warm, sub)`` (``sub(a)``: ``a``'s rows ``warm``) gives
    the log(1 + batches) quantiles of the tasks with ``min_obs`` observations or more; the others get the cap."""
    lengths = np.asarray(lengths, np.int64)
    cap = np.asarray(cap_remaining, np.float64)
    out = np.repeat(cap[:, None], n_levels, axis=1)
    warm = np.flatnonzero(lengths >= min_obs)
    if len(warm):
        q = warm_log1p(warm, lambda a: np.asarray(a)[warm])
        out[warm] = np.clip(np.expm1(q), 0.0, cap[warm, None])
    return out


def cold_prior_from(cc, bank_path, band):
    """The ``cold`` setting of a qr config (``{split, k, band}`` or null) → a ColdPrior at ``cold.band``'s levels (lo,
    0.5, hi; default the head's ``band``: the rule reads a cold task's band as it reads the head's), or None."""
    if not cc:
        return None
    split, k = cc.get("split", "fm_train"), cc.get("k", 10)
    if cc.get("band") is not None:
        band = check_cold_band(cc.get("band"))
    if split not in SPLITS:
        raise ConfigError(f"predictor.cold.split={split!r} is not a bank split (known: {', '.join(SPLITS)})")
    if isinstance(k, bool) or not isinstance(k, int) or k < 1:
        raise ConfigError(f"predictor.cold.k must be an integer >= 1 (nearest training curves), got {k!r}")
    return ColdPrior.from_bank(load_bank(bank_path or default_bank_path()), split=str(split), k=k, quantiles=band)


def check_cold_band(band, where: str = "predictor.cold.band") -> tuple:
    """Three levels (lo, 0.5, hi) with 0 < lo < 0.5 < hi < 1, else a one-line ConfigError."""
    try:
        band = tuple(float(x) for x in plain_config(band))
    except (TypeError, ValueError):
        raise ConfigError(f"{where} must be three levels (lo, 0.5, hi), got {band!r}") from None
    if len(band) != 3 or band[1] != 0.5 or not 0 < band[0] < 0.5 < band[2] < 1:
        raise ConfigError(f"{where} must be three levels (lo, 0.5, hi) with 0 < lo < 0.5 < hi < 1, got {list(band)}")
    return band
