"""Lightning callbacks of a curve-generation run: the per-batch loss record and the mid-run checkpoint."""

from __future__ import annotations

import math
import os
from pathlib import Path

import lightning as L


class LossRecorder(L.Callback):
    """Appends each batch's loss to ``losses`` (list[float], one per step); stops on a non-finite loss (``failure``).
    Its record is part of a run's checkpoint, so a resumed run continues it (``resumed_at``: batches restored)."""

    def __init__(self):
        super().__init__()
        self.losses: list[float] = []
        self.failure: str | None = None
        self.resumed_at = 0

    def on_train_batch_end(self, trainer, pl_module, outputs, batch, batch_idx) -> None:
        loss = outputs["loss"] if isinstance(outputs, dict) else outputs
        value = float(loss.detach())
        self.losses.append(value)
        if not math.isfinite(value) and self.failure is None:
            self.failure = f"non-finite loss {value} at batch {len(self.losses)}"
            trainer.should_stop = True

    def state_dict(self) -> dict:
        return {"losses": list(self.losses), "failure": self.failure}

    def load_state_dict(self, state: dict) -> None:
        self.losses, self.failure = list(state["losses"]), state["failure"]
        self.resumed_at = len(self.losses)


class MidRunCheckpoint(L.Callback):
    """Every ``every`` optimisation steps, an atomic Lightning checkpoint at ``path`` that ``trainer.fit(...,
    ckpt_path=path)`` resumes exactly: model, Adam state, callback states (the loss record) and the data loader's
    position (a ``StatefulDataLoader``: Lightning saves its ``state_dict()``; with a sized loader Lightning fetches
    no batch ahead, so that is the position of the last batch used). List it after the ``LossRecorder``."""

    def __init__(self, path: str | os.PathLike, every: int):
        super().__init__()
        self.path, self.every = Path(path), int(every)

    def on_train_batch_end(self, trainer, pl_module, outputs, batch, batch_idx) -> None:
        if (
            trainer.global_step % self.every == 0
            and trainer.global_step < trainer.max_steps
            and not trainer.should_stop
        ):
            self.path.parent.mkdir(parents=True, exist_ok=True)
            tmp = self.path.with_name(f".{self.path.name}.{os.getpid()}.tmp")
            trainer.save_checkpoint(tmp)
            os.replace(tmp, self.path)
