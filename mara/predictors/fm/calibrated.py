"""FM with a band calibrated per family (``predictor: fm_cal``): split-conformal offsets fitted on held-out curves.

The flow net and its median are the FM's; only the q10–q90 band changes. Each family the FM was trained on gets its
own split-conformal offset (``conformal_offset``, log(1 + batches)) per observation-count bin (``obs_bins``: early
prefixes are less certain), fitted on that family's calibration curves — the bank's ``calibration.split``
(``pool``: neither the FM's training curves nor the prediction benchmark's ID queries, which come from ``fm_val``).
A family the FM never trained on gets its offsets from its own ``cal`` curves where a calibration bank holds them
(``calibration.cal_bank``: ``beside`` = ``<bank>_cal.parquet`` next to the bank, e.g. the zoo's RL and ViT runs
generated for this alone, never drawn by the simulator or the prediction benchmark); one without any (a truly
novel family) gets, per bin, the widest of the training families' offsets. Both choices for the training families
come from a leave-one-family-out check on the calibration curves only (``held_out_family_coverage``,
``scripts/fm_cal_heldout.py``, docs/predictor.md): each training family in turn plays the novel one, and the rule
that kept every such family's coverage highest was chosen.
Shapes: ``[B]`` per task, ``[B, Q]`` quantiles; offsets per family ``[n_bins]`` (bins of ``np.digitize(n_obs,
obs_bins)``: ``len(obs_bins) + 1``).
"""

from __future__ import annotations

from pathlib import Path
from typing import Mapping

import numpy as np

from mara.core.config import ConfigError
from mara.curves.bank import SPLITS, default_bank_path, load_bank
from mara.predictors.bands.cold import ColdPrior
from mara.predictors.bands.conformal import apply_offset, band_metrics, conformal_offset
from mara.predictors.fm.predictor import FlowPredictor
from mara.predictors.prefix import build_queries, cal_bank_path, query_inputs, untrained_cal_queries

OBS_BINS = (10, 20)  # n_obs bins [.., 10), [10, 20), [20, ..)
ROUNDOFF = 1e-9  # log1p batches: a relative 1e-9 of the band's ends


def group_offsets(lo, hi, truth, family, n_obs, obs_bins=OBS_BINS, coverage: float = 0.8) -> dict[str, np.ndarray]:
    """{family: [n_bins] split-conformal offsets} of the band [lo, hi] [B] against ``truth`` [B], one per (family,
    observation-count bin); nan for a bin without calibration queries."""
    family, bins = np.asarray(family), np.digitize(np.asarray(n_obs), obs_bins)
    lo, hi, truth = (np.asarray(a, np.float64) for a in (lo, hi, truth))
    out = {}
    for f in np.unique(family):
        out[str(f)] = np.array(
            [
                conformal_offset(lo[m], hi[m], truth[m], coverage) if m.any() else np.nan
                for m in ((family == f) & (bins == b) for b in range(len(obs_bins) + 1))
            ]
        )
    return out


def novel_offset(offsets: Mapping[str, np.ndarray], n_bins: int) -> np.ndarray:
    """Offsets [n_bins] for a family without calibration curves: per bin the widest known family's (0 if none)."""
    if not offsets:
        return np.zeros(n_bins)
    stack = np.stack([np.asarray(v, np.float64) for v in offsets.values()])
    return np.where(np.isnan(stack).all(0), 0.0, np.nanmax(np.where(np.isnan(stack), -np.inf, stack), axis=0))


def offsets_for(family, n_obs, offsets: Mapping[str, np.ndarray], novel: np.ndarray, obs_bins=OBS_BINS) -> np.ndarray:
    """Per-row offsets [B]: the row's (family, bin) offset; ``novel``'s for an unknown family, an empty bin or no
    family given."""
    bins = np.digitize(np.asarray(n_obs), obs_bins)
    out = np.asarray(novel, np.float64)[bins]
    if family is not None:
        for f, v in offsets.items():
            m = np.asarray(family) == f
            own = np.asarray(v, np.float64)[bins[m]]
            out[m] = np.where(np.isnan(own), out[m], own)
    return out


class CalibratedFlowPredictor:
    """RemainingPredictor: the FM's median, its flow-sample band widened by a per-(family, n_obs bin) offset."""

    name = "fm_cal"
    supports_cache = True

    def __init__(self, fm: FlowPredictor, offsets: Mapping[str, np.ndarray], obs_bins=OBS_BINS, cold=None, novel=None):
        self.fm, self.obs_bins, self.cold = fm, tuple(int(b) for b in obs_bins), cold  # cold: ColdPrior or None (cap)
        self.offsets = {str(k): np.asarray(v, np.float64) for k, v in offsets.items()}
        # novel: [n_bins] for families without offsets; default the widest of ``offsets``
        self.novel = novel_offset(self.offsets, len(self.obs_bins) + 1) if novel is None else np.asarray(novel, float)
        self.quantiles = fm.quantiles

    @classmethod
    def from_config(cls, cfg, bank_path=None) -> "CalibratedFlowPredictor":
        """The FM of ``cfg`` (band offset 0) calibrated on the bank at ``bank_path`` (``cfg.calibration``)."""
        cal, cc = cfg.get("calibration", {}) or {}, cfg.get("cold")
        for key, split in (("calibration.split", cal.get("split", "pool")), ("cold.split", (cc or {}).get("split"))):
            if split is not None and split not in SPLITS:
                raise ConfigError(f"predictor.{key}={split!r} is not a bank split (known: {', '.join(SPLITS)})")
        fm = FlowPredictor.from_config(cfg, bank_path)
        fm.band_offset = 0.0  # the per-family offsets replace the checkpoint's pooled one
        bins = tuple(cal.get("obs_bins", OBS_BINS))
        bank_path = Path(bank_path or default_bank_path())
        bank = load_bank(bank_path)
        kw = dict(
            coverage=float(cal.get("coverage", 0.8)),
            obs_bins=bins,
            obs_every=int(cal.get("obs_every", 10)),
            seed=int(cal.get("seed", 0)),
        )
        offsets = calibrate(fm, bank, split=str(cal.get("split", "pool")), **kw)
        novel = novel_offset(offsets, len(bins) + 1)  # from the training families only
        extra = cal_bank_path(bank_path, cal.get("cal_bank"))
        if extra is not None:
            offsets.update(calibrate_untrained(fm, bank, load_bank(extra), **kw))
        cold = None
        if cc:
            cold = ColdPrior.from_bank(
                bank, split=str(cc.get("split", "fm_train")), k=int(cc.get("k", 10)), quantiles=fm.quantiles
            )
        return cls(fm, offsets, bins, cold, novel)

    def predict_quantiles(self, S, L, lengths, eps, cap_remaining, batch_size, lr, family=None, keys=None, cache=None):
        """[B, Q] ordered remaining batches; the outer columns widened by each row's (family, n_obs bin) offset."""
        q = self.fm.predict_quantiles(
            S, L, lengths, eps, cap_remaining, batch_size, lr, family=family, keys=keys, cache=cache
        )
        cap = np.asarray(cap_remaining, np.float64)
        off = offsets_for(family, lengths, self.offsets, self.novel, self.obs_bins)
        mid = int(np.argmin(np.abs(np.asarray(self.quantiles) - 0.5)))
        # + ROUNDOFF: a truth whose score equals the offset (ties are common: remaining batches are integers) stays
        # inside after the expm1∘log1p round trip, as the split-conformal count assumes
        lo, hi = apply_offset(q[:, 0], q[:, mid], q[:, -1], off + ROUNDOFF, cap)
        q = q.copy()
        q[:, 0], q[:, -1] = lo, hi
        cold = np.flatnonzero(np.asarray(lengths) < self.fm.min_obs)
        q[cold] = cap[cold, None]
        if self.cold is not None and len(cold) and family is not None:
            sub = lambda a: np.asarray(a)[cold]  # noqa: E731
            q[cold] = self.cold.predict_quantiles(
                sub(S), sub(L), sub(lengths), sub(eps), cap[cold], sub(batch_size), sub(family)
            )
        return q

    def predict_remaining(self, S, L, lengths, eps, cap_remaining, batch_size, lr, family=None, keys=None, cache=None):
        """The FM's median remaining batches [B] (the calibration moves only the band); cold tasks: the cold prior's
        median when ``cold`` is set."""
        med = self.fm.predict_remaining(
            S, L, lengths, eps, cap_remaining, batch_size, lr, family=family, keys=keys, cache=cache
        )
        cold = np.flatnonzero(np.asarray(lengths) < self.fm.min_obs)
        if self.cold is None or not len(cold) or family is None:
            return med
        sub = lambda a: np.asarray(a)[cold]  # noqa: E731
        q = self.cold.predict_quantiles(
            sub(S), sub(L), sub(lengths), sub(eps), sub(cap_remaining), sub(batch_size), sub(family)
        )
        med = np.array(med, np.float64)
        med[cold] = q[:, len(self.quantiles) // 2]
        return med

    def sample_futures(self, S, L, lengths, cap_remaining, batch_size, lr, n_samples: int, n_steps: int):
        """The FM's sampled futures (s_edges [B, K+1], L̂ [B, N, K+1]); the calibration does not touch them."""
        return self.fm.sample_futures(S, L, lengths, cap_remaining, batch_size, lr, n_samples, n_steps)


def _raw_calibration_band(fm: FlowPredictor, bank, split: str, obs_every: int, seed: int):
    """(queries, raw FM band [Q, 3], family [Q]) on the ``split`` curves of the families the FM was trained on (those
    with ``fm_train`` curves), queried as the prediction benchmark queries (``seed``: ε / budget draws)."""
    fams = [f for f in np.unique(bank.family) if len(bank.rows(f, "fm_train")) and len(bank.rows(f, split))]
    if not fams or not bank.family_params:
        return None, None, None
    q = build_queries(bank, fams, split, bank.family_params, obs_every=obs_every, seed=seed)
    fam = bank.family[q["rows"]]
    return q, fm.predict_quantiles(*query_inputs(bank, q, obs_every), family=fam), fam


def calibrate(
    fm: FlowPredictor,
    bank,
    split: str = "pool",
    coverage: float = 0.8,
    obs_bins=OBS_BINS,
    obs_every: int = 10,
    seed: int = 0,
) -> dict[str, np.ndarray]:
    """Per-(family, n_obs bin) offsets of ``fm``'s raw band on the training families' ``split`` curves."""
    q, raw, fam = _raw_calibration_band(fm, bank, split, obs_every, seed)
    if q is None:
        return {}
    return group_offsets(raw[:, 0], raw[:, -1], q["truth"], fam, q["n_obs"], obs_bins, coverage)


def calibrate_untrained(
    fm: FlowPredictor, bank, cal_bank, coverage: float = 0.8, obs_bins=OBS_BINS, obs_every: int = 10, seed: int = 0
) -> dict[str, np.ndarray]:
    """Per-(family, n_obs bin) offsets for the families ``bank`` has no training curves of, fitted on their ``cal``
    curves in ``cal_bank``."""
    q = untrained_cal_queries(bank, cal_bank, obs_every, seed)
    if q is None:
        return {}
    fam = cal_bank.family[q["rows"]]
    raw = fm.predict_quantiles(*query_inputs(cal_bank, q, obs_every), family=fam)
    return group_offsets(raw[:, 0], raw[:, -1], q["truth"], fam, q["n_obs"], obs_bins, coverage)


NOVEL_RULES = {
    "widest": lambda v: np.nanmax(v, axis=0),
    "upper_quartile": lambda v: np.nanquantile(v, 0.75, axis=0),
    "median": lambda v: np.nanmedian(v, axis=0),
}


def held_out_family_coverage(
    fm: FlowPredictor,
    bank,
    split: str = "pool",
    coverage: float = 0.8,
    obs_bins_options=((), OBS_BINS),
    obs_every: int = 10,
    seed: int = 0,
) -> dict:
    """The check behind the novel-family rule, on calibration curves only: each training family in turn plays the
    novel family — its band gets the offsets a rule derives from the other families' (``pooled``: fitted on their
    pooled scores) — and its q10–q90 coverage is measured. {(rule, obs_bins): {family: coverage}}."""
    q, raw, fam = _raw_calibration_band(fm, bank, split, obs_every, seed)
    out = {}
    for bins in obs_bins_options:
        bins = tuple(bins)
        offs = group_offsets(raw[:, 0], raw[:, -1], q["truth"], fam, q["n_obs"], bins, coverage)
        for f in offs:
            m, rest = fam == f, fam != f
            others = np.stack([v for g, v in offs.items() if g != f])
            cands = {
                "pooled": group_offsets(
                    raw[rest, 0],
                    raw[rest, -1],
                    q["truth"][rest],
                    np.full(rest.sum(), "all"),
                    q["n_obs"][rest],
                    bins,
                    coverage,
                )["all"],
                **{r: agg(others) for r, agg in NOVEL_RULES.items()},
            }
            for rule, e in cands.items():
                off = offsets_for(None, q["n_obs"][m], {}, np.nan_to_num(e), bins)
                lo, hi = apply_offset(raw[m, 0], raw[m, 1], raw[m, -1], off + ROUNDOFF, q["cap"][m])
                band = np.stack([lo, raw[m, 1], hi], axis=1)
                out.setdefault((rule, bins), {})[f] = band_metrics(band, q["truth"][m])["coverage"]
    return out
