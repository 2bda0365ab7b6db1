"""Lightning callback recording a run's per-batch training loss (mean-reduced scalar per optimisation step)."""
from __future__ import annotations

import math

import lightning as L


class LossRecorder(L.Callback):
    """Appends each batch's loss to ``losses`` (list[float], one per step); stops on a non-finite loss (``failure``)."""

    def __init__(self):
        super().__init__()
        self.losses: list[float] = []
        self.failure: str | None = None

    def on_train_batch_end(self, trainer, pl_module, outputs, batch, batch_idx) -> None:
        loss = outputs["loss"] if isinstance(outputs, dict) else outputs
        value = float(loss.detach())
        self.losses.append(value)
        if not math.isfinite(value) and self.failure is None:
            self.failure = f"non-finite loss {value} at batch {len(self.losses)}"
            trainer.should_stop = True
