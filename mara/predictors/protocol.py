"""The predictor interface shared by every allocator, and the config-driven factory.

Shapes: ``B`` tasks, ``H`` padded history. S, L [B, H] float64 (processed samples, cumulative-average
loss), lengths [B] int, eps [B], cap_remaining [B] int batches, batch_size [B], lr [B];
optional ``family`` [B] str selects per-family inference settings. Returns [B] float remaining
batches in [0, cap_remaining]; fewer than 4 observations → cap_remaining.

Uncertainty: a predictor may also offer ``predict_quantiles`` (same arguments) -> [B, Q] ordered remaining
batches at its ``quantiles`` (default q10, q50, q90; the middle column equals ``predict_remaining``). FM: flow-
sample quantiles with a conformal offset calibrated on validation curves; WLS: a heuristic slope-error band.
``predict_band`` gives (lo, median, hi) for any predictor (a degenerate band lo = median = hi for predictors
without ``predict_quantiles``), so existing callers of ``predict_remaining`` are unaffected.
"""
from __future__ import annotations

from typing import Protocol, runtime_checkable

import numpy as np

from mara.predictors.fm import FlowPredictor
from mara.predictors.quantile_head import QuantileHeadPredictor
from mara.predictors.truth import TruthPredictor
from mara.predictors.wls import WLSPredictor


@runtime_checkable
class RemainingPredictor(Protocol):
    name: str

    def predict_remaining(self, S, L, lengths, eps, cap_remaining, batch_size, lr, family=None) -> np.ndarray: ...


def predict_band(predictor, S, L, lengths, eps, cap_remaining, batch_size, lr, family=None, keys=None, cache=None):
    """(lo [B], median [B], hi [B]) remaining batches: the predictor's outer quantiles and its median.

    ``keys`` (one hashable per row naming its observed history) and ``cache`` (``FlowSampleCache``) let a predictor
    that ``supports_cache`` reuse its policy-independent work; other predictors ignore them."""
    extra = {"keys": keys, "cache": cache} if cache is not None and getattr(predictor, "supports_cache", False) else {}
    if hasattr(predictor, "predict_quantiles"):
        q = predictor.predict_quantiles(S, L, lengths, eps, cap_remaining, batch_size, lr, family=family, **extra)
        return q[:, 0], q[:, q.shape[1] // 2], q[:, -1]
    med = predictor.predict_remaining(S, L, lengths, eps, cap_remaining, batch_size, lr, family=family, **extra)
    return med, med, med


def _wls(cfg, bank_path=None):

    return WLSPredictor.from_config(cfg)


def _fm(cfg, bank_path=None):

    return FlowPredictor.from_config(cfg, bank_path)


def _fm_cal(cfg, bank_path=None):
    from mara.predictors.calibrated import CalibratedFlowPredictor

    return CalibratedFlowPredictor.from_config(cfg, bank_path)


def _qr(cfg, bank_path=None):

    return QuantileHeadPredictor.from_config(cfg, bank_path)


def _truth(cfg, bank_path=None):

    return TruthPredictor.from_config(cfg)


PREDICTORS = {"wls": _wls, "fm": _fm, "fm_cal": _fm_cal, "qr": _qr, "truth": _truth}


def build_predictor(cfg_predictor, bank_path=None) -> RemainingPredictor:
    """Predictor named by ``cfg_predictor.name`` (conf/predictor/{fm,wls,qr,truth}.yaml); ``bank_path`` picks the shipped
    FM checkpoint trained on that bank when no ``ckpt_path`` is given."""
    name = cfg_predictor.get("name")
    if name not in PREDICTORS:
        raise ValueError(f"predictor.name must be one of {sorted(PREDICTORS)}, got {name!r}")
    return PREDICTORS[name](cfg_predictor, bank_path)
