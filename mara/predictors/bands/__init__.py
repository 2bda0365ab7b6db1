"""Bands and their calibration, shared by the predictors: ``conformal`` (split-conformal offsets, band metrics),
``level_shift`` (quantile levels recalibrated for untrained families), ``cold`` (estimates for cold tasks)."""
