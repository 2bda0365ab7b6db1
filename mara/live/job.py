"""One live training job: a zoo model, its optimiser and a resumable data position, one batch per ``step()``.

A job is the training run a curve-bank row describes (family, seed, batch size, lr; ``tasks_zoo``'s
``build_run``). Its whole state — model, Adam moments, the data order and position — is a ``state_dict()``
(tensors and plain numbers), so a preempted job resumes exactly where it stopped, in this process or another
one (another node). The batches come from the family's DataModule loader, a torchdata ``StatefulDataLoader``
in the order the bank's curves were trained in (``tasks_zoo.batching``); its ``state_dict()`` is the position.
"""

from __future__ import annotations

import io
import json
from dataclasses import asdict, dataclass

import torch

from mara.core.config import ConfigError
from mara.core.safe_load import CheckpointError, load_checkpoint
from mara.live.validation import Validation, to_device
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

    def build_job(self):
        """(module, resumable batches, validation or None): what a ``TrainingJob`` trains; zoo runs have no
        validation."""
        return (*self.build_run(), None)

    def build_run(self):
        """(LightningModule, prepared DataModule's resumable batches) of this run: the zoo family's recipe."""
        from tasks_zoo.registry import build_run

        module, dm = build_run(
            self.family,
            seed=self.seed,
            batch_size=self.batch_size,
            lr=self.lr,
            source=self.source,
            data_root=self.data_root,
            cache_dir=self.cache_dir,
        )
        # the zoo loader's order: reshuffled per epoch, or the file order of families with data_order: file
        return module, ResumableBatches(dm.train_dataloader())


def import_object(path: str):
    """The class or function ``pkg.module.Name`` names (raises ImportError / AttributeError as Python does)."""
    import importlib

    module, _, name = str(path).rpartition(".")
    if not module:
        raise ImportError(f"{path!r} is not a dotted import path (package.module.Class)")
    return getattr(importlib.import_module(module), name)


def target_class(where: str, field: str, target: str):
    """The class a job's ``module`` / ``data`` ``_target_`` names, found by import alone and checked to be a
    LightningModule / LightningDataModule subclass without calling it (importing runs the named module's top-level
    code, as ``import`` does: a job file is code, like a Python script); one-line ConfigError naming the field."""
    import inspect
    import sys

    import lightning as L

    base = {"module": L.LightningModule, "data": L.LightningDataModule}[field]
    try:
        obj = import_object(target)
    except Exception as exc:
        raise ConfigError(
            f"{where}: {field}._target_: cannot import {target!r} ({type(exc).__name__}: {exc})"
        ) from None
    legacy = sys.modules.get("pytorch_lightning")  # a class built on the older package name is the same kind of thing
    bases = (base, getattr(legacy, base.__name__)) if legacy is not None and hasattr(legacy, base.__name__) else (base,)
    if not (inspect.isclass(obj) and issubclass(obj, bases)):
        what = f"the class {obj.__module__}.{obj.__qualname__}" if inspect.isclass(obj) else f"a {type(obj).__name__}"
        raise ConfigError(
            f"{where}: {field}._target_: {target!r} is {what}, not a {base.__name__} subclass (a job "
            f"names its {base.__name__} class and that class's init arguments)"
        )
    return obj


@dataclass(frozen=True)
class UserJobSpec(JobSpec):
    """A ``JobSpec`` whose run is a user's LightningModule and LightningDataModule (job files, ``mara.live.jobfile``);
    arguments are JSON text (plain values only).

    The DataModule is prepared and set up first, then the seed fixes the model's initialisation (as a zoo run).
    Batches do not come from the DataModule's own loader: its ``dataset`` and the spec's ``batch_size`` (the loader's)
    feed the zoo's resumable seeded loader (reshuffled each epoch from ``seed``, full batches only), whose position
    is part of the job's state, so a preempted user job resumes on exactly the next batch, in any worker.
    ``val_metric`` (a job with a metric target): the name its ``validation_step`` logs, evaluated on the DataModule's
    ``val_dataloader()`` every ``val_every`` processed batches (``mara.live.validation``)."""

    name: str = ""
    module_target: str = ""
    module_args: str = "{}"
    data_target: str = ""
    data_args: str = "{}"
    val_metric: str = ""
    val_every: int = 0

    def build_module(self):
        import warnings

        import torch

        # self.log() in a training_step outside a Trainer warns once per process; live jobs report losses themselves
        warnings.filterwarnings(
            "ignore", message=r".*self\.log\(\)` but the `self\.trainer` reference is not registered.*"
        )
        torch.manual_seed(self.seed)
        return target_class(f"job {self.name!r}", "module", self.module_target)(**json.loads(self.module_args))

    def build_datamodule(self):
        dm = target_class(f"job {self.name!r}", "data", self.data_target)(**json.loads(self.data_args))
        if hasattr(dm, "prepare_data"):
            dm.prepare_data()
        if hasattr(dm, "setup"):
            dm.setup("fit")
        return dm

    def build_run(self):
        return self.build_job()[:2]

    def build_job(self):
        from tasks_zoo.batching import ResumableBatches, seeded_loader

        dm = self.build_datamodule()
        loader = dm.train_dataloader()
        batches = ResumableBatches(seeded_loader(loader.dataset, self.batch_size, self.seed))
        validation = Validation(dm.val_dataloader(), self.val_metric, self.val_every) if self.val_metric else None
        return self.build_module(), batches, validation


def spec_from_dict(d: dict) -> JobSpec:
    """The spec a ``JobSpec.to_dict()`` (or a ``UserJobSpec``'s) describes."""
    return UserJobSpec(**d) if "module_target" in d else JobSpec(**d)


def step_loss(out):
    """The loss tensor a ``training_step`` returned (a tensor, or Lightning's ``{"loss": tensor, ...}``); None if
    none."""
    if isinstance(out, dict):
        out = out.get("loss")
    return out if isinstance(out, torch.Tensor) and out.numel() == 1 and out.requires_grad else None


def first_optimizer(out):
    """The optimiser ``configure_optimizers`` returned (an optimiser, a list/tuple whose first item is one or a list of
    them, or Lightning's ``{"optimizer": ...}``); schedulers are not stepped by live jobs."""
    if isinstance(out, dict):
        out = out.get("optimizer")
    while isinstance(out, (list, tuple)) and out:
        out = out[0]
    if not isinstance(out, torch.optim.Optimizer):
        raise TypeError(f"configure_optimizers() returned no optimizer ({type(out).__name__})")
    return out


class TrainingJob:
    """A zoo training run advanced one optimisation step at a time; ``step()`` returns that batch's loss."""

    def __init__(self, spec: JobSpec, device: str = "cpu"):
        self.spec, self.device = spec, torch.device(device)
        module, self.batches, self.validation = spec.build_job()
        self.module = module.to(self.device)
        self.optimizer = first_optimizer(self.module.configure_optimizers())
        self.processed = 0
        self.metrics: list[tuple[int, float]] = []  # (processed batches, metric value) since the last take_metrics()

    def step(self) -> float:
        """One optimisation step on the next mini-batch (the Lightning loop's order: zero grad, loss, backward,
        step)."""
        batch = to_device(self.batches.next(), self.device)
        self.module.train()
        self.optimizer.zero_grad(set_to_none=True)
        loss = step_loss(self.module.training_step(batch, self.processed))
        if loss is None:
            raise TypeError(f"job {self.spec.job_id}: training_step returned no scalar loss with a gradient")
        loss.backward()
        self.optimizer.step()
        self.processed += 1
        if self.validation is not None and self.validation.due(self.processed):
            self.metrics.append((self.processed, self.validation.value(self.module, self.device)))
        return float(loss.detach())

    def take_metrics(self) -> tuple:
        """The validations run since the last call, ((processed batches, value), ...), and forget them."""
        out, self.metrics = tuple(self.metrics), []
        return out

    def state_dict(self) -> dict:
        return {
            "spec": self.spec.to_dict(),
            "model": self.module.state_dict(),
            "optimizer": self.optimizer.state_dict(),
            "batches": self.batches.state_dict(),
            "processed": self.processed,
        }

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
        """Rebuild a job from ``to_bytes`` output (on this process's device) and restore its state; the bytes are
        read as data (``weights_only=True``), so a state from another worker or machine cannot run code here."""
        state = load_checkpoint(blob, "live job state")  # tensors and plain values only: never runs code
        if not isinstance(state, dict) or not {"spec", "model", "optimizer", "batches", "processed"} <= state.keys():
            raise CheckpointError(
                "live job state is not a TrainingJob.to_bytes() state (no spec/model/optimizer/batches)"
            )
        try:
            spec = spec_from_dict(state["spec"])
        except TypeError as exc:
            raise CheckpointError(f"live job state has no valid job spec ({exc})") from None
        job = cls(spec, device)
        job.load_state_dict(state)
        return job
