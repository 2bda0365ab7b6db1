"""A Lightning callback that logs a training's progress with an ETA (mara.core.runlog.Progress), rank 0 only.

A module-level class with plain attributes, so ``ddp_spawn`` can pickle it."""

from __future__ import annotations

import lightning as L

from mara.core.runlog import Progress


class ProgressCallback(L.Callback):
    """Logs ``what: NN.N% · elapsed · ETA`` after training batches, at most every ``every_s`` seconds.

    Progress is ``pl_module.global_env_steps / total_env_steps`` when ``total_env_steps`` is given (MAT-PPO),
    else the fraction of ``trainer.max_epochs`` done (the FM predictor; early stopping may end it sooner)."""

    def __init__(self, what: str, total_env_steps: int | None = None, every_s: float = 20.0) -> None:
        self.what, self.total_env_steps, self.every_s = what, total_env_steps, every_s
        self.progress = None

    def fraction(self, trainer, pl_module) -> float:
        if self.total_env_steps:
            return float(getattr(pl_module, "global_env_steps", 0)) / max(self.total_env_steps, 1)
        n = max(trainer.num_training_batches, 1) if isinstance(trainer.num_training_batches, int) else 1
        done = trainer.fit_loop.epoch_loop.batch_progress.current.completed
        return (trainer.current_epoch + min(done, n) / n) / max(trainer.max_epochs or 1, 1)

    def on_train_start(self, trainer, pl_module) -> None:
        self.progress = Progress(self.what, self.every_s)

    def on_train_batch_end(self, trainer, pl_module, *args) -> None:
        if trainer.is_global_zero and self.progress is not None:
            self.progress.update(min(self.fraction(trainer, pl_module), 0.999), f"epoch {trainer.current_epoch}")

    def on_train_end(self, trainer, pl_module) -> None:
        if trainer.is_global_zero and self.progress is not None:
            self.progress.update(1.0, f"epoch {trainer.current_epoch}")
