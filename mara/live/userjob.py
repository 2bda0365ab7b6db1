"""A user's own training run as a live job: any LightningModule + LightningDataModule named by import path.

The run is built as a zoo run is (``tasks_zoo.registry.build_run``): the DataModule is prepared and set up first,
then the seed fixes the model's initialisation. Batches do not come from the DataModule's own loader: MARA takes
that loader's ``dataset`` and ``batch_size`` and serves them through the zoo's resumable seeded loader
(``tasks_zoo.batching.seeded_loader``: reshuffled each epoch from ``seed``, full batches only), whose position is part
of the job's state, so a preempted job resumes on the exact next batch, in any worker. Only the first optimiser of
``configure_optimizers`` is stepped (no learning-rate schedulers), once per batch.
"""
from __future__ import annotations

import json
from dataclasses import dataclass

from mara.live.job import JobSpec


def import_object(path: str):
    """The class or function ``pkg.module.Name`` names (raises ImportError / AttributeError as Python does)."""
    import importlib

    module, _, name = str(path).rpartition(".")
    if not module:
        raise ImportError(f"{path!r} is not a dotted import path (package.module.Class)")
    return getattr(importlib.import_module(module), name)


@dataclass(frozen=True)
class UserJobSpec(JobSpec):
    """A ``JobSpec`` whose run is the user's module and DataModule; arguments are JSON text (plain values only)."""

    name: str = ""
    module_target: str = ""
    module_args: str = "{}"
    data_target: str = ""
    data_args: str = "{}"

    def build_module(self):
        import warnings

        import torch

        # self.log() in a training_step outside a Trainer warns once per process; live jobs report losses themselves
        warnings.filterwarnings("ignore", message=r".*self\.log\(\)` but the `self\.trainer` reference is not registered.*")
        torch.manual_seed(self.seed)
        return import_object(self.module_target)(**json.loads(self.module_args))

    def build_datamodule(self):
        dm = import_object(self.data_target)(**json.loads(self.data_args))
        if hasattr(dm, "prepare_data"):
            dm.prepare_data()
        if hasattr(dm, "setup"):
            dm.setup("fit")
        return dm

    def build_run(self):
        from tasks_zoo.batching import ResumableBatches, seeded_loader

        loader = self.build_datamodule().train_dataloader()
        batches = ResumableBatches(seeded_loader(loader.dataset, self.batch_size, self.seed))
        return self.build_module(), batches


def loader_batch_size(data_target: str, data_args: dict) -> int:
    """The batch size of the DataModule's ``train_dataloader()`` (built once, on this process)."""
    spec = UserJobSpec(job_id=0, family="", seed=0, batch_size=1, lr=0.0, data_target=data_target, data_args=json.dumps(data_args))
    loader = spec.build_datamodule().train_dataloader()
    if getattr(loader, "batch_size", None) is None or getattr(loader, "dataset", None) is None:
        raise TypeError("train_dataloader() must return a DataLoader with a dataset and a batch_size")
    return int(loader.batch_size)
