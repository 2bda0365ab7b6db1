"""One live training job: a zoo model, its optimiser and a resumable data position, one batch per ``step()``.

A job is the training run a curve-bank row describes (family, seed, batch size, lr; ``tasks_zoo``'s
``build_run``). Its whole state — model, Adam moments, the data order and position — is a ``state_dict()``
(tensors and plain numbers), so a preempted job resumes exactly where it stopped, in this process or another
one (another node). The batches come from the family's DataModule loader, a torchdata ``StatefulDataLoader``
in the order the bank's curves were trained in (``tasks_zoo.batching``); its ``state_dict()`` is the position.
"""
from __future__ import annotations

import io
from dataclasses import asdict, dataclass

import torch

from mara.core.safe_load import CheckpointError, load_checkpoint
from tasks_zoo.batching import ResumableBatches


@dataclass(frozen=True)
class JobSpec:
    """Everything that fixes a live job's training run."""

    job_id: int
    family: str
    seed: int
    batch_size: int
    lr: float
    source: str = "real"  # real | synthetic (tasks_zoo data source)
    data_root: str = "data_cache"
    cache_dir: str = "data_cache"

    def to_dict(self) -> dict:
        return asdict(self)


class TrainingJob:
    """A zoo training run advanced one optimisation step at a time; ``step()`` returns that batch's loss."""

    def __init__(self, spec: JobSpec, device: str = "cpu"):
        from tasks_zoo.registry import build_run

        self.spec, self.device = spec, torch.device(device)
        module, dm = build_run(spec.family, seed=spec.seed, batch_size=spec.batch_size, lr=spec.lr, source=spec.source,
                               data_root=spec.data_root, cache_dir=spec.cache_dir)
        self.module = module.to(self.device)
        self.optimizer = self.module.configure_optimizers()
        # the zoo loader's order: reshuffled per epoch, or the file order of families with data_order: file
        self.batches = ResumableBatches(dm.train_dataloader())
        self.processed = 0

    def step(self) -> float:
        """One optimisation step on the next mini-batch (the Lightning loop's order: zero grad, loss, backward, step)."""
        x, y = self.batches.next()
        x, y = x.to(self.device), y.to(self.device)
        self.module.train()
        self.optimizer.zero_grad(set_to_none=True)
        loss = self.module.training_step((x, y), self.processed)
        loss.backward()
        self.optimizer.step()
        self.processed += 1
        return float(loss.detach())

    def state_dict(self) -> dict:
        return {"spec": self.spec.to_dict(), "model": self.module.state_dict(), "optimizer": self.optimizer.state_dict(),
                "batches": self.batches.state_dict(), "processed": self.processed}

    def load_state_dict(self, state: dict) -> None:
        self.module.load_state_dict(state["model"])
        self.optimizer.load_state_dict(state["optimizer"])
        self.batches.load_state_dict(state["batches"])
        self.processed = int(state["processed"])

    def to_bytes(self) -> bytes:
        """The job's state serialised (moves to another process or machine)."""
        buf = io.BytesIO()
        torch.save(self.state_dict(), buf)
        return buf.getvalue()

    @classmethod
    def from_bytes(cls, blob: bytes, device: str = "cpu") -> "TrainingJob":
        """Rebuild a job from ``to_bytes`` output (on this process's device) and restore its state; the bytes are read as
        data (``weights_only=True``), so a state from another worker or machine cannot run code here."""
        state = load_checkpoint(blob, "live job state")  # tensors and plain values only: never runs code
        if not isinstance(state, dict) or not {"spec", "model", "optimizer", "batches", "processed"} <= state.keys():
            raise CheckpointError("live job state is not a TrainingJob.to_bytes() state (no spec/model/optimizer/batches)")
        try:
            spec = JobSpec(**state["spec"])
        except TypeError as exc:
            raise CheckpointError(f"live job state has no valid job spec ({exc})") from None
        job = cls(spec, device)
        job.load_state_dict(state)
        return job
