"""The flow-matching remaining-demand predictor (paper §4.1, A.2): inference and checkpoint I/O.

Shapes: ``B`` tasks, ``H`` history, ``N`` flow samples, ``K`` bins. One batched call covers all tasks;
tasks are grouped only by their (n_samples, n_steps) setting (per-family override, A.2).
"""

from __future__ import annotations

from pathlib import Path
from typing import Mapping

import numpy as np
import torch

from mara.core.safe_load import (
    check_kind,
    load_checkpoint,
    net_from,
    save_net,
)
from mara.curves.bank import SHIPPED_BANKS_DIR, default_bank_path
from mara.predictors.bands.conformal import DEFAULT_QUANTILES, apply_offset
from mara.predictors.baselines.wls import WLSPredictor
from mara.predictors.fm.crossing import decode_crossing
from mara.predictors.fm.flow import euler_sample, sobol_gaussian
from mara.predictors.fm.nets import FlowNet
from mara.predictors.fm.targets import DELTA, bin_edges, reconstruct_L
from mara.predictors.prefix import history_features, static_context

MIN_OBS = 4


def default_ckpt_path(bank_path=None, variant: str | None = None) -> Path:
    """The shipped FM checkpoint trained on a bank: ``mara/data/checkpoints/fm_<bank>[_<variant>].ckpt`` for a bank
    shipped in the package (so ``bank=parametric`` gets the FM trained on parametric curves), else the default
    bank's. ``variant`` (``predictor.ckpt_variant``) names a later predictor, e.g. ``v3`` -> fm_zoo_v3.ckpt."""

    ckpts = Path(__file__).resolve().parents[2] / "data" / "checkpoints"
    suffix = f"_{variant}" if variant else ""
    if bank_path is not None:
        bank = Path(bank_path).resolve()
        own = ckpts / f"fm_{bank.stem}{suffix}.ckpt"
        if bank.parent == SHIPPED_BANKS_DIR and own.exists():
            return own
    path = ckpts / f"fm_{default_bank_path().stem}{suffix}.ckpt"
    if variant and not path.exists():
        raise FileNotFoundError(f"no shipped FM checkpoint {path.name} (predictor.ckpt_variant={variant!r})")
    return path


def save_checkpoint(net: FlowNet, hparams: Mapping, path, extra: Mapping | None = None) -> Path:
    """Plain torch file: net state dict (incl. standardisation stats) + net hparams (+ extra info), tensors and plain
    values only (loads with ``weights_only=True``); ``recipe`` (in ``extra``) names the command that made it."""
    return save_net(path, "fm", net, hparams, extra)


def load_net(path) -> tuple[FlowNet, dict]:
    """The FM net of a ``save_checkpoint`` file and the file's dict, loaded as data only; a file that is not an FM
    checkpoint is a one-line ``CheckpointError`` naming it."""
    blob = check_kind(load_checkpoint(path, "FM checkpoint"), path, "fm", ("state_dict", "hparams"))
    return net_from(FlowNet, blob, path, "an FM predictor checkpoint"), blob


def _prefix_end(S, L, lengths, cap_remaining, batch_size):
    """Arrays as float64/int64 and each prefix's end: (S, L, lengths, S0 [B], L0 [B], horizon h [B] in samples)."""
    S, L = np.asarray(S, np.float64), np.asarray(L, np.float64)
    lengths = np.asarray(lengths, np.int64)
    rows, last = np.arange(S.shape[0]), lengths - 1
    h = np.maximum(np.asarray(cap_remaining, np.float64), 1.0) * np.asarray(batch_size, np.float64)
    return S, L, lengths, S[rows, last], L[rows, last], h


class FlowPredictor:
    """RemainingPredictor: Sobol noise → Euler → Eq. 6 reconstruction → first crossing per sample → median.

    Uncertainty (``predict_quantiles``): quantiles of the per-sample crossings, widened by a split-conformal
    ``band_offset`` (log1p batches) calibrated on validation curves. Fallback for prefixes unlike the training
    data: ``novelty`` holds the Gaussian fit (mean, precision) of the training context vectors and the sorted
    Mahalanobis d² of validation prefixes; a prefix's score is its d² percentile among them (prefix only).
    Above ``fallback.threshold`` the median moves toward WLS in log1p space (weight ``wls_weight`` × how far
    past the threshold) and the band is widened to contain the WLS estimate plus ``widen`` (log1p)."""

    name = "fm"
    supports_cache = True  # predict_* accept keys=/cache= (mara/predictors/fm/cache.py)

    def __init__(
        self,
        net: FlowNet,
        n_samples: int = 8,
        n_steps: int = 4,
        per_family: Mapping | None = None,
        sobol_seed: int = 0,
        delta: float = DELTA,
        min_obs: int = MIN_OBS,
        band_offset: float = 0.0,
        quantiles=DEFAULT_QUANTILES,
        novelty: Mapping | None = None,
        fallback: Mapping | None = None,
    ):
        self.net = net.eval()
        self.band_offset, self.quantiles = float(band_offset), tuple(float(q) for q in quantiles)
        self.n_samples, self.n_steps = int(n_samples), int(n_steps)
        self.per_family = {
            k: (int(v.get("n_samples", n_samples)), int(v.get("n_steps", n_steps)))
            for k, v in dict(per_family or {}).items()
        }
        self.sobol_seed, self.delta, self.min_obs = int(sobol_seed), float(delta), int(min_obs)
        self.novelty = {k: np.asarray(v, np.float64) for k, v in dict(novelty).items()} if novelty else None
        fb = dict(fallback or {})
        self.fallback = {
            "threshold": float(fb.get("threshold", 1.0)),
            "wls_weight": float(fb.get("wls_weight", 0.0)),
            "widen": float(fb.get("widen", 0.0)),
        }
        self._noise: dict[int, torch.Tensor] = {}
        self._wls = None

    @classmethod
    def from_config(cls, cfg, bank_path=None) -> "FlowPredictor":
        """``ckpt_path`` null: the shipped checkpoint matching ``bank_path`` (see ``default_ckpt_path``)."""
        inf = cfg.get("inference", {}) or {}
        band = cfg.get("band", {}) or {}
        path = cfg.get("ckpt_path") or default_ckpt_path(bank_path, cfg.get("ckpt_variant"))
        net, blob = load_net(path)
        extra = blob.get("extra", {}) or {}
        per_family = {k: dict(v) for k, v in (inf.get("per_family", {}) or {}).items()}
        offset = band.get("offset")  # null: the checkpoint's conformal offset (0 for checkpoints without one)
        offset = extra.get("band_offset", 0.0) if offset is None else offset
        fallback = dict(cfg.get("fallback", {}) or {})
        return cls(
            net,
            n_samples=inf.get("n_samples", 8),
            n_steps=inf.get("n_steps", 4),
            per_family=per_family,
            sobol_seed=inf.get("sobol_seed", 0),
            delta=cfg.get("delta", DELTA),
            band_offset=offset,
            quantiles=tuple(band.get("quantiles", DEFAULT_QUANTILES)),
            novelty=extra.get("novelty"),
            fallback=fallback,
        )

    def noise(self, n: int) -> torch.Tensor:
        if n not in self._noise:
            self._noise[n] = sobol_gaussian(n, self.net.n_bins, seed=self.sobol_seed)
        return self._noise[n]

    def _inputs(self, S, L, lengths, cap_remaining, batch_size, lr):
        """Net inputs from the observed prefix only: x [B, H, 4], static, S0, L0, horizon (samples), bs."""
        S, L, lengths, S0, L0, h = _prefix_end(S, L, lengths, cap_remaining, batch_size)
        bs = np.asarray(batch_size, np.float64)
        H = int(lengths.max())
        fs = getattr(self.net, "feature_set", "v1")
        x = torch.from_numpy(history_features(S[:, :H], L[:, :H], lengths, bs, fs).astype(np.float32))
        st = torch.from_numpy(static_context(bs, lr, L0, h, fs, S[:, :H], L[:, :H], lengths).astype(np.float32))
        return x, st, S0, L0, h

    def _net_samples(self, S, L, lengths, cap_remaining, batch_size, lr, n_samples: int, n_steps: int):
        """The network part: (flow samples y [B, N, K] float32 in target units, context vectors [B, D] float32)."""
        lengths = np.asarray(lengths, np.int64)
        x, st, *_ = self._inputs(S, L, lengths, cap_remaining, batch_size, lr)
        B = x.shape[0]
        dev = next(self.net.parameters()).device  # a net being trained on a GPU (validation MAE during fit)
        with torch.inference_mode():
            c = self.net.context_vector(x.to(dev), torch.from_numpy(lengths), st.to(dev))
            ctx = self.net.velocity.context_term(c)[:, None, :]  # [B, 1, hidden]
            z0 = self.noise(n_samples).to(dev)[None].expand(B, -1, -1)
            z1 = euler_sample(self.net.velocity, z0, ctx, n_steps)
            y = self.net.target_norm.inverse(z1)  # [B, N, K]
        return y.cpu().numpy(), c.cpu().numpy()

    def _sample(self, S, L, lengths, cap_remaining, batch_size, lr, n_samples: int, n_steps: int):
        """(s_edges [B, K+1], L̂ [B, N, K+1], context vectors [B, D])."""
        S, L, lengths, S0, L0, h = _prefix_end(S, L, lengths, cap_remaining, batch_size)
        y, c = self._net_samples(S, L, lengths, cap_remaining, batch_size, lr, n_samples, n_steps)
        edges = bin_edges(S0, h, self.net.n_bins)
        _, L_hat = reconstruct_L(y.astype(np.float64), edges[:, None, :], L0[:, None], self.delta)
        return edges, L_hat, c.astype(np.float64)

    def _sample_scored(
        self, S, L, lengths, cap_remaining, batch_size, lr, n_samples: int, n_steps: int, keys=None, cache=None
    ):
        """(s_edges [B, K+1], L̂ [B, N, K+1], novelty score [B]): everything of a prediction that does not depend on ε.

        With a ``FlowSampleCache`` and one history key per row (``keys``; the key fixes the prefix, its end point and
        the horizon, hence all three), only keys not yet cached are computed, by the same row-wise code; cached rows
        return the stored values exactly (mara/predictors/fm/cache.py)."""
        if cache is None or keys is None:
            edges, L_hat, c = self._sample(S, L, lengths, cap_remaining, batch_size, lr, n_samples, n_steps)
            return edges, L_hat, self.novelty_from_context(c)
        full = [(k, n_samples, n_steps) for k in keys]
        miss = cache.missing(full)
        if len(miss):
            sub = lambda a: np.asarray(a)[miss]  # noqa: E731
            edges, L_hat, c = self._sample(
                sub(S), sub(L), sub(lengths), sub(cap_remaining), sub(batch_size), sub(lr), n_samples, n_steps
            )
            cache.put([full[i] for i in miss], edges, L_hat, self.novelty_from_context(c))
        return cache.get(full)

    def sample_futures(self, S, L, lengths, cap_remaining, batch_size, lr, n_samples: int, n_steps: int):
        """Sampled futures for warm tasks: (s_edges [B, K+1], L̂ [B, N, K+1]) at horizon cap_remaining·bs."""
        edges, L_hat, _ = self._sample(S, L, lengths, cap_remaining, batch_size, lr, n_samples, n_steps)
        return edges, L_hat

    def context_vectors(self, S, L, lengths, cap_remaining, batch_size, lr) -> np.ndarray:
        """The prefix's context vectors [B, D] (no flow sampling)."""
        x, st, *_ = self._inputs(S, L, lengths, cap_remaining, batch_size, lr)
        dev = next(self.net.parameters()).device
        with torch.inference_mode():
            c = self.net.context_vector(x.to(dev), torch.from_numpy(np.asarray(lengths, np.int64)), st.to(dev))
            return c.double().cpu().numpy()

    def novelty_from_context(self, c: np.ndarray) -> np.ndarray:
        """Percentile [B] in [0, 1] of the Mahalanobis d² of context vectors among validation prefixes; 0 without
        stats."""
        if self.novelty is None:
            return np.zeros(len(c))
        return novelty_percentile(c, self.novelty)

    def novelty_score(self, S, L, lengths, cap_remaining, batch_size, lr) -> np.ndarray:
        """The fallback score of each prefix [B] (uses the observed prefix, cap and lr only, never the future)."""
        return self.novelty_from_context(self.context_vectors(S, L, lengths, cap_remaining, batch_size, lr))

    def _grouped(self, S, L, lengths, eps, cap_remaining, batch_size, lr, family, keys=None, cache=None):
        """Per-sample crossings reduced to [B, Q] quantiles (median in the 0.5 column) and the novelty score [B];
        cold tasks (< min_obs) get cap everywhere and score 0."""
        lengths = np.asarray(lengths, np.int64)
        cap = np.asarray(cap_remaining, np.float64)
        qs = np.asarray(self.quantiles)
        mid = int(np.argmin(np.abs(qs - 0.5)))
        out = np.repeat(cap[:, None], len(qs), axis=1)
        score = np.zeros(len(cap))
        warm = lengths >= self.min_obs
        settings = np.tile(np.array([self.n_samples, self.n_steps], np.int64), (len(cap), 1))
        if family is not None and self.per_family:  # a vectorised lookup per overridden family (not one per row)
            fam = np.asarray(family)
            for f, ns_nt in self.per_family.items():
                settings[fam == f] = ns_nt
        for ns, nt in {tuple(r) for r in settings[warm].tolist()}:
            idx = np.flatnonzero(warm & (settings[:, 0] == ns) & (settings[:, 1] == nt))
            bs = np.asarray(batch_size)[idx]
            edges, L_hat, nov = self._sample_scored(
                np.asarray(S)[idx],
                np.asarray(L)[idx],
                lengths[idx],
                cap[idx],
                bs,
                np.asarray(lr)[idx],
                ns,
                nt,
                keys=None if keys is None else [keys[i] for i in idx],
                cache=cache,
            )
            rem = decode_crossing(edges[:, None, :], L_hat, np.asarray(eps)[idx, None], bs[:, None], cap[idx, None])
            q = np.quantile(rem, qs, axis=1).T  # [b, Q]
            q[:, mid] = np.clip(np.median(rem, axis=1), 0.0, cap[idx])
            out[idx] = q
            score[idx] = nov
        return out, score, warm, mid

    def _wls_band(self, S, L, lengths, eps, cap, batch_size, lr):
        if self._wls is None:
            self._wls = WLSPredictor(min_obs=self.min_obs)
        return self._wls.predict_quantiles(S, L, lengths, eps, cap, batch_size, lr)[:, 1]

    def _predict(self, S, L, lengths, eps, cap_remaining, batch_size, lr, family, keys=None, cache=None):
        """([B, Q] ordered quantiles incl. band offset and fallback, novelty score [B])."""
        cap = np.asarray(cap_remaining, np.float64)
        q, score, warm, mid = self._grouped(S, L, lengths, eps, cap, batch_size, lr, family, keys, cache)
        fb = self.fallback
        lo, med, hi = q[:, 0], q[:, mid], q[:, -1]
        extra = np.zeros(len(cap))
        thr = fb["threshold"]
        far = warm & (score > thr) if thr < 1.0 else np.zeros(len(cap), bool)
        if far.any():
            a = np.clip((score - thr) / max(1.0 - thr, 1e-9), 0.0, 1.0) * far
            w = np.zeros(len(cap))
            idx = np.flatnonzero(far)
            w_rem = np.full(len(cap), np.nan)
            w_rem[idx] = self._wls_band(
                np.asarray(S)[idx],
                np.asarray(L)[idx],
                np.asarray(lengths)[idx],
                np.asarray(eps)[idx],
                cap[idx],
                np.asarray(batch_size)[idx],
                np.asarray(lr)[idx],
            )
            w[idx] = a[idx] * fb["wls_weight"]
            blend = np.expm1((1 - w[idx]) * np.log1p(med[idx]) + w[idx] * np.log1p(w_rem[idx]))
            med = med.copy()
            med[idx] = np.clip(blend, 0.0, cap[idx])
            lo, hi = lo.copy(), hi.copy()
            lo[idx] = np.minimum(lo[idx], w_rem[idx])
            hi[idx] = np.maximum(hi[idx], w_rem[idx])
            extra = a * fb["widen"]
        lo, hi = apply_offset(lo, med, hi, self.band_offset + extra, cap)
        q = q.copy()
        q[:, 0], q[:, mid], q[:, -1] = lo, med, hi
        q = np.clip(np.sort(q, axis=1), 0.0, cap[:, None])
        q[~warm] = cap[~warm, None]
        return q, score

    def predict_remaining(
        self, S, L, lengths, eps, cap_remaining, batch_size, lr, family=None, keys=None, cache=None
    ) -> np.ndarray:
        """Median remaining batches [B] (the paper's point estimate; moved toward WLS only by the fallback).
        ``keys``/``cache``: optional reuse of the network part per observed history (``FlowSampleCache``)."""
        q, _ = self._predict(S, L, lengths, eps, cap_remaining, batch_size, lr, family, keys, cache)
        return q[:, int(np.argmin(np.abs(np.asarray(self.quantiles) - 0.5)))]

    def predict_quantiles(
        self, S, L, lengths, eps, cap_remaining, batch_size, lr, family=None, keys=None, cache=None
    ) -> np.ndarray:
        """[B, Q] remaining batches at ``self.quantiles`` (default q10, q50, q90): the q50 column equals
        ``predict_remaining``; the outer ones are the flow samples' quantiles widened by the conformal offset
        (and, past the novelty threshold, by the fallback). Ordered, within [0, cap]; cold tasks get cap."""
        return self._predict(S, L, lengths, eps, cap_remaining, batch_size, lr, family, keys, cache)[0]


def novelty_stats(c_train: np.ndarray, c_val: np.ndarray, ridge: float = 1e-3, n_ref: int = 201) -> dict:
    """Gaussian fit of training context vectors [n, D] and the d² quantiles of validation ones (reference)."""
    mean = c_train.mean(0)
    cov = np.cov(c_train, rowvar=False) + ridge * np.eye(c_train.shape[1])
    prec = np.linalg.inv(cov)
    d = c_val - mean
    ref = np.quantile(np.einsum("bi,ij,bj->b", d, prec, d), np.linspace(0, 1, n_ref))
    return {"mean": mean, "prec": prec, "ref": ref}


def novelty_percentile(c: np.ndarray, stats: Mapping) -> np.ndarray:
    """Share of validation prefixes with a smaller Mahalanobis d² than each context vector: [B] in [0, 1]."""
    d = np.asarray(c, np.float64) - stats["mean"]
    d2 = np.einsum("bi,ij,bj->b", d, stats["prec"], d)
    ref = np.asarray(stats["ref"])
    return np.interp(d2, ref, np.linspace(0.0, 1.0, len(ref)), left=0.0, right=1.0)
