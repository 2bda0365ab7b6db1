"""The in-context decision head (``qr_ctx``): the decision head conditioned on the family's already-seen curves.

``family`` (the family-context features), ``head`` (the predictor, checkpoint I/O), ``train``
(``python -m mara.predictors.context_train``), ``validate`` (``python -m mara.predictors.qr_ctx.validate``).
"""
