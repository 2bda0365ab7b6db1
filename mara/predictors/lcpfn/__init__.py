"""LC-PFN (Adriaensen et al., NeurIPS 2023) as a remaining-batches predictor (``lcpfn``, ``lcpfn_ft``).

``prior`` (the learning-curve prior), ``net`` (the transformer), ``data`` (curves as LC-PFN reads them, training
batches), ``predictor`` (inference, checkpoint I/O), ``train`` (``python -m mara.predictors.lcpfn_train``).
"""
