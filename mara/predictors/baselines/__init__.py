"""Predictors without training: ``wls`` (LARA's power-law extrapolation) and ``truth`` (the perfect-prediction
bound, reading the task's own curve)."""
