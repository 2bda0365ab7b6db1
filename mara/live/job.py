"""One live training job: a zoo model, its optimiser and a resumable data position, one batch per ``step()``.

A job is the training run a curve-bank row describes (family, seed, batch size, lr; ``tasks_zoo``'s
``build_task``). Its whole state — model, Adam moments, the data order and position — is a
``state_dict()`` of plain tensors, so a preempted job resumes exactly where it stopped, in this
process or another one (another node). The batch order is that of the zoo's ``seeded_loader``
(a ``DataLoader`` with a seeded generator, reshuffled per epoch), reproduced draw for draw so that
the position is a pair (generator state at the epoch start, batches taken) instead of a live iterator.
"""
from __future__ import annotations

import io
from dataclasses import asdict, dataclass

import torch
from torch.utils.data import default_collate


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


class ResumableBatches:
    """Mini-batches of ``dataset`` in ``seeded_loader(dataset, batch_size, seed, shuffle)`` order, with a resumable position.

    Per epoch a seeded ``DataLoader`` draws, from its generator: one int64 (the iterator's base seed),
    one ``randperm(n)`` (the order), and — when the epoch's last full batch has been taken and the sampler
    is exhausted — one more ``randperm(n)`` that yields nothing. The same draws happen here.
    """

    def __init__(self, dataset, batch_size: int, seed: int, shuffle: bool = True):
        if len(dataset) < batch_size:
            raise ValueError(f"dataset of {len(dataset)} samples is smaller than batch size {batch_size}")
        self.dataset, self.batch_size, self.shuffle = dataset, int(batch_size), bool(shuffle)
        self.n = len(dataset)
        self.per_epoch = self.n // self.batch_size
        self.gen = torch.Generator().manual_seed(int(seed))
        self.epoch, self.pos = 0, 0
        self._start_epoch()

    def _start_epoch(self) -> None:
        self.epoch_state = self.gen.get_state()
        torch.empty((), dtype=torch.int64).random_(generator=self.gen)  # the DataLoader iterator's base seed
        # shuffle=False (a family with data_order: file): the data set's own order every epoch, as seeded_loader
        self.perm = torch.randperm(self.n, generator=self.gen) if self.shuffle else torch.arange(self.n)
        self.pos = 0

    def next(self):
        if self.pos >= self.per_epoch:
            if self.shuffle:
                torch.randperm(self.n, generator=self.gen)  # the exhausted sampler's trailing draw
            self.epoch += 1
            self._start_epoch()
        idx = self.perm[self.pos * self.batch_size : (self.pos + 1) * self.batch_size].tolist()
        self.pos += 1
        return default_collate([self.dataset[i] for i in idx])

    def state_dict(self) -> dict:
        return {"epoch_state": self.epoch_state.clone(), "epoch": self.epoch, "pos": self.pos}

    def load_state_dict(self, state: dict) -> None:
        self.gen.set_state(state["epoch_state"])
        self._start_epoch()
        self.epoch, self.pos = int(state["epoch"]), int(state["pos"])


class TrainingJob:
    """A zoo training run advanced one optimisation step at a time; ``step()`` returns that batch's loss."""

    def __init__(self, spec: JobSpec, device: str = "cpu"):
        from tasks_zoo.registry import build_task

        self.spec, self.device = spec, torch.device(device)
        module, loader = build_task(spec.family, seed=spec.seed, batch_size=spec.batch_size, lr=spec.lr, source=spec.source,
                                    data_root=spec.data_root, cache_dir=spec.cache_dir)
        self.module = module.to(self.device)
        self.optimizer = self.module.configure_optimizers()
        # the zoo loader's order: reshuffled per epoch, or the file order of families with data_order: file
        shuffled = isinstance(loader.sampler, torch.utils.data.RandomSampler)
        self.batches = ResumableBatches(loader.dataset, spec.batch_size, spec.seed, shuffle=shuffled)
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
        """Rebuild a job from ``to_bytes`` output (on this process's device) and restore its state."""
        state = torch.load(io.BytesIO(blob), map_location=device, weights_only=False)
        job = cls(JobSpec(**state["spec"]), device)
        job.load_state_dict(state)
        return job
