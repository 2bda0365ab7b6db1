"""Remaining-demand predictors: a job's loss prefix -> quantiles of the batches it still needs.

Shared here: ``protocol`` (the interface), ``factory`` (a name or config -> a predictor, from the registry),
``prefix`` (a loss prefix: observed histories, features, true remaining batches, benchmark queries), ``cache``
(the FM's reusable work), ``fit_settings`` / ``stage`` (typed training settings, the predictor stage).
One sub-package per family: ``fm/``, ``qr/`` (decision head), ``qr_ctx/`` (in-context head), ``lcpfn/``,
``bands/`` (calibration of bands), ``baselines/`` (WLS, truth).
"""

from mara.predictors.factory import predictor_from
from mara.predictors.protocol import RemainingPredictor

__all__ = ["RemainingPredictor", "predictor_from"]
