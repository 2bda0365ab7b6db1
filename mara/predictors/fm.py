"""The flow-matching remaining-demand predictor (paper §4.1, A.2): inference and checkpoint I/O.

Shapes: ``B`` tasks, ``H`` history, ``N`` flow samples, ``K`` bins. One batched call covers all tasks;
tasks are grouped only by their (n_samples, n_steps) setting (per-family override, A.2).
"""
from __future__ import annotations

from pathlib import Path
from typing import Mapping

import numpy as np
import torch

from mara.predictors.crossing import decode_crossing
from mara.predictors.features import history_features, static_context
from mara.predictors.flow import euler_sample, sobol_gaussian
from mara.predictors.nets import FlowNet
from mara.predictors.targets import DELTA, bin_edges, reconstruct_L
from mara.predictors.uncertainty import DEFAULT_QUANTILES, apply_offset

MIN_OBS = 4


def default_ckpt_path(bank_path=None) -> Path:
    """The shipped FM checkpoint trained on a bank: ``mara/data/checkpoints/fm_<bank>.ckpt`` for a bank shipped in
    the package (so ``bank=parametric`` gets the FM trained on parametric curves), else the default bank's."""
    from mara.curves.bank import SHIPPED_BANKS_DIR, default_bank_path

    ckpts = Path(__file__).resolve().parent.parent / "data" / "checkpoints"
    if bank_path is not None:
        bank = Path(bank_path).resolve()
        own = ckpts / f"fm_{bank.stem}.ckpt"
        if bank.parent == SHIPPED_BANKS_DIR and own.exists():
            return own
    return ckpts / f"fm_{default_bank_path().stem}.ckpt"


def save_checkpoint(net: FlowNet, hparams: Mapping, path, extra: Mapping | None = None) -> Path:
    """Plain torch file: net state dict (incl. standardisation stats) + net hparams (+ extra info)."""
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    torch.save({"state_dict": net.state_dict(), "hparams": dict(hparams), "extra": dict(extra or {})}, path)
    return path


def load_net(path) -> tuple[FlowNet, dict]:
    blob = torch.load(Path(path), map_location="cpu", weights_only=False)
    net = FlowNet(**blob["hparams"])
    net.load_state_dict(blob["state_dict"])
    net.eval()
    return net, blob


class FlowPredictor:
    """RemainingPredictor: Sobol noise → Euler → Eq. 6 reconstruction → first crossing per sample → median."""

    name = "fm"

    def __init__(self, net: FlowNet, n_samples: int = 8, n_steps: int = 4, per_family: Mapping | None = None,
                 sobol_seed: int = 0, delta: float = DELTA, min_obs: int = MIN_OBS, band_offset: float = 0.0,
                 quantiles=DEFAULT_QUANTILES):
        self.net = net.eval()
        self.band_offset, self.quantiles = float(band_offset), tuple(float(q) for q in quantiles)
        self.n_samples, self.n_steps = int(n_samples), int(n_steps)
        self.per_family = {k: (int(v.get("n_samples", n_samples)), int(v.get("n_steps", n_steps)))
                           for k, v in dict(per_family or {}).items()}
        self.sobol_seed, self.delta, self.min_obs = int(sobol_seed), float(delta), int(min_obs)
        self._noise: dict[int, torch.Tensor] = {}

    @classmethod
    def from_config(cls, cfg, bank_path=None) -> "FlowPredictor":
        """``ckpt_path`` null: the shipped checkpoint matching ``bank_path`` (see ``default_ckpt_path``)."""
        inf = cfg.get("inference", {}) or {}
        band = cfg.get("band", {}) or {}
        path = cfg.get("ckpt_path") or default_ckpt_path(bank_path)
        net, blob = load_net(path)
        per_family = {k: dict(v) for k, v in (inf.get("per_family", {}) or {}).items()}
        offset = band.get("offset")  # null: the checkpoint's conformal offset (0 for checkpoints without one)
        offset = blob.get("extra", {}).get("band_offset", 0.0) if offset is None else offset
        return cls(net, n_samples=inf.get("n_samples", 8), n_steps=inf.get("n_steps", 4), per_family=per_family,
                   sobol_seed=inf.get("sobol_seed", 0), delta=cfg.get("delta", DELTA), band_offset=offset,
                   quantiles=tuple(band.get("quantiles", DEFAULT_QUANTILES)))

    def noise(self, n: int) -> torch.Tensor:
        if n not in self._noise:
            self._noise[n] = sobol_gaussian(n, self.net.n_bins, seed=self.sobol_seed)
        return self._noise[n]

    def sample_futures(self, S, L, lengths, cap_remaining, batch_size, lr, n_samples: int, n_steps: int):
        """Sampled futures for warm tasks: (s_edges [B, K+1], L̂ [B, N, K+1]) at horizon cap_remaining·bs."""
        S = np.asarray(S, np.float64)
        L = np.asarray(L, np.float64)
        lengths = np.asarray(lengths, np.int64)
        B = S.shape[0]
        last = lengths - 1
        S0, L0 = S[np.arange(B), last], L[np.arange(B), last]
        bs = np.asarray(batch_size, np.float64)
        h = np.maximum(np.asarray(cap_remaining, np.float64), 1.0) * bs
        H = int(lengths.max())
        fs = getattr(self.net, "feature_set", "v1")
        x = torch.from_numpy(history_features(S[:, :H], L[:, :H], lengths, bs, fs).astype(np.float32))
        st = torch.from_numpy(static_context(bs, lr, L0, h, fs).astype(np.float32))
        with torch.inference_mode():
            ctx = self.net.encode(x, torch.from_numpy(lengths), st)[:, None, :]  # [B, 1, D]
            z0 = self.noise(n_samples)[None].expand(B, -1, -1)
            z1 = euler_sample(self.net.velocity, z0, ctx, n_steps)
            y = self.net.target_norm.inverse(z1).double().numpy()  # [B, N, K]
        edges = bin_edges(S0, h, self.net.n_bins)
        _, L_hat = reconstruct_L(y, edges[:, None, :], L0[:, None], self.delta)
        return edges, L_hat

    def _crossings(self, S, L, lengths, eps, cap, bs, lr, n_samples, n_steps) -> np.ndarray:
        """Remaining batches to the first ε crossing of every flow sample: [B, N]."""
        edges, L_hat = self.sample_futures(S, L, lengths, cap, bs, lr, n_samples, n_steps)
        return decode_crossing(edges[:, None, :], L_hat, np.asarray(eps)[:, None], np.asarray(bs)[:, None], cap[:, None])

    def _grouped(self, S, L, lengths, eps, cap_remaining, batch_size, lr, family, reduce, n_out: int) -> np.ndarray:
        """Apply ``reduce(rem [b, N], cap [b]) -> [b, n_out]`` per (n_samples, n_steps) group; cold tasks get cap."""
        lengths = np.asarray(lengths, np.int64)
        cap = np.asarray(cap_remaining, np.float64)
        out = np.repeat(cap[:, None], n_out, axis=1)
        warm = lengths >= self.min_obs
        settings = np.array([self.per_family.get(f, (self.n_samples, self.n_steps)) for f in family]) \
            if family is not None else np.tile([self.n_samples, self.n_steps], (len(cap), 1))
        for ns, nt in {tuple(r) for r in settings[warm].tolist()}:
            idx = np.flatnonzero(warm & (settings[:, 0] == ns) & (settings[:, 1] == nt))
            rem = self._crossings(np.asarray(S)[idx], np.asarray(L)[idx], lengths[idx], np.asarray(eps)[idx], cap[idx],
                                  np.asarray(batch_size)[idx], np.asarray(lr)[idx], ns, nt)
            out[idx] = reduce(rem, cap[idx])
        return out

    def predict_remaining(self, S, L, lengths, eps, cap_remaining, batch_size, lr, family=None) -> np.ndarray:
        """Median over flow samples of the remaining batches [B] (the paper's point estimate)."""
        med = lambda rem, cap: np.clip(np.median(rem, axis=1), 0.0, cap)[:, None]
        return self._grouped(S, L, lengths, eps, cap_remaining, batch_size, lr, family, med, 1)[:, 0]

    def predict_quantiles(self, S, L, lengths, eps, cap_remaining, batch_size, lr, family=None) -> np.ndarray:
        """[B, Q] remaining batches at ``self.quantiles`` (default q10, q50, q90): the middle column is the median
        (= ``predict_remaining``); the outer ones are the flow samples' quantiles widened by the conformal
        ``band_offset`` (log1p space). Ordered, within [0, cap]; cold tasks (< min_obs) get cap everywhere."""
        qs = np.asarray(self.quantiles)

        def reduce(rem, cap):
            q = np.quantile(rem, qs, axis=1).T  # [b, Q]
            med = np.median(rem, axis=1)
            q[:, np.argmin(np.abs(qs - 0.5))] = med
            lo, hi = apply_offset(q[:, 0], med, q[:, -1], self.band_offset, cap)
            q[:, 0], q[:, -1] = lo, hi
            return np.clip(np.sort(q, axis=1), 0.0, cap[:, None])

        return self._grouped(S, L, lengths, eps, cap_remaining, batch_size, lr, family, reduce, len(qs))
