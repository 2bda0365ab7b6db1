"""The flow-matching predictor (paper §4.1, A.2) and its band calibrated per family (``fm``, ``fm_cal``).

``predictor`` (inference, checkpoint I/O), ``nets``, ``flow`` (CondOT path, Euler sampler), ``targets`` (Eq. 4–6),
``crossing`` (first crossing of ε), ``data`` / ``augment`` (training examples), ``module`` (LightningModule),
``val_metrics``, ``train`` (``python -m mara.predictors.fm.train``), ``calibrated`` (``fm_cal``).
"""
