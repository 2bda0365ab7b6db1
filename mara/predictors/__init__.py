"""Remaining-demand predictors: WLS (LARA) and conditional flow matching (MARA §4.1)."""

from mara.predictors.factory import predictor_from
from mara.predictors.protocol import RemainingPredictor

__all__ = ["RemainingPredictor", "predictor_from"]
