"""The decision head (``qr``): quantiles of the remaining batches to ε by quantile regression.

``levels`` (pinball loss, monotone quantiles), ``data`` (its inputs and training examples), ``head`` (the network,
the predictor, checkpoint I/O), ``train`` (``python -m mara.predictors.quantile_train``), ``prior_curves`` (the LC-PFN
prior's curves as optional pre-training curves).
"""
