"""Remaining-demand predictors: WLS (LARA) and conditional flow matching (MARA §4.1)."""
from mara.predictors.protocol import RemainingPredictor, build_predictor

__all__ = ["RemainingPredictor", "build_predictor"]
