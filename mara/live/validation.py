"""A user job's validation pass: the metrics its module's ``validation_step`` logs with ``self.log``, without a Trainer.

A job file's metric target (``target: {metric, mode, value, loss}``) is judged on these values. There is no Trainer,
so the module's ``log`` (and ``log_dict``, which calls it) is replaced on the instance for the duration of the pass
and every call is recorded; each name is reduced over the pass as Lightning reduces an epoch-level value: ``mean``
(the default) weighted by batch size, ``sum``, ``max`` or ``min``; a torchmetrics ``Metric`` logged as the value is
``compute()``d at the end and reset. The pass is exact and leaves training untouched: the validation set is read in
its own order (no shuffling, every sample), under ``no_grad`` and ``eval()``, inside ``torch.random.fork_rng`` so a
module that draws random numbers does not move the training run's generator; so a job validated at batch s gives the
same values whether or not it was preempted, moved or resumed before.
"""

from __future__ import annotations

import math

import torch
from torch.utils.data import DataLoader


def to_device(batch, device: torch.device):
    """A batch (tensor, or tuples / lists / dicts of them) on ``device``."""
    if isinstance(batch, torch.Tensor):
        return batch.to(device)
    if isinstance(batch, (list, tuple)):
        return type(batch)(to_device(b, device) for b in batch)
    if isinstance(batch, dict):
        return {k: to_device(v, device) for k, v in batch.items()}
    return batch


#: Lightning's reductions of an epoch-level logged value (``reduce_fx``), by name or torch function
REDUCE = {
    "mean": "mean",
    "sum": "sum",
    "max": "max",
    "min": "min",
    torch.mean: "mean",
    torch.sum: "sum",
    torch.max: "max",
    torch.min: "min",
}


def has_validation_step(module) -> bool:
    """True when the module defines its own ``validation_step`` (LightningModule's default does nothing useful)."""
    import lightning as L

    return getattr(type(module), "validation_step", None) not in (None, L.LightningModule.validation_step)


def fixed_order(loader) -> DataLoader:
    """The loader's dataset in file order, every sample, in batches of the loader's ``batch_size``."""
    return DataLoader(
        loader.dataset, batch_size=loader.batch_size or 1, shuffle=False, drop_last=False, collate_fn=loader.collate_fn
    )


def _batch_size(batch) -> int:
    """Samples in a batch as Lightning infers them: the first tensor's leading dimension (1 if none)."""
    if isinstance(batch, torch.Tensor):
        return int(batch.shape[0]) if batch.dim() else 1
    items = batch.values() if isinstance(batch, dict) else batch if isinstance(batch, (list, tuple)) else ()
    for b in items:
        n = _batch_size(b)
        if n:
            return n
    return 0


class _Log:
    """Stands in for ``LightningModule.log`` during a pass: records (value, batch size, reduction) per name."""

    def __init__(self):
        self.calls: dict[str, list] = {}
        self.batch = 1

    def __call__(self, name, value, *args, reduce_fx="mean", batch_size=None, **kwargs):
        self.calls.setdefault(str(name), []).append((value, batch_size or self.batch, reduce_fx))

    def reduce(self, name: str) -> float:
        """The epoch value of ``name`` (TypeError / ValueError for a value that is neither a number, a scalar
        tensor nor a Metric, or an unknown reduction)."""
        calls = self.calls[name]
        last = calls[-1][0]
        if hasattr(last, "compute") and hasattr(last, "reset"):  # a torchmetrics Metric: its own accumulation
            value = float(last.compute())
            last.reset()
            return value
        how = REDUCE.get(calls[-1][2])
        if how is None:
            raise ValueError(f"metric {name!r}: reduce_fx {calls[-1][2]!r} is not one of mean, sum, max, min")
        vals = []
        for v, _, _ in calls:
            if isinstance(v, torch.Tensor):
                if v.numel() != 1:
                    raise ValueError(f"metric {name!r} is logged as a tensor of {v.numel()} values, not a scalar")
                v = v.item()
            if isinstance(v, bool) or not isinstance(v, (int, float)):
                raise TypeError(f"metric {name!r} is logged as {type(v).__name__}, not a number")
            vals.append(float(v))
        if how == "mean":
            w = [float(n) for _, n, _ in calls]
            return sum(v * n for v, n in zip(vals, w)) / max(sum(w), 1e-300)
        return {"sum": sum, "max": max, "min": min}[how](vals)


def validate(module, loader, device: torch.device, limit: int | None = None) -> dict[str, float | None]:
    """One validation pass of ``module`` over ``loader`` (at most ``limit`` batches) -> {logged name: epoch value}
    (None for a name whose values cannot be reduced to a number). See the module docstring."""
    log = _Log()
    was_training = module.training
    module.eval()
    module.log = log  # shadows the class's method on this instance only
    try:
        with torch.random.fork_rng(devices=[device] if device.type == "cuda" else []), torch.no_grad():
            module.on_validation_epoch_start()
            for i, batch in enumerate(loader):
                if limit is not None and i >= limit:
                    break
                log.batch = _batch_size(batch) or 1
                module.validation_step(to_device(batch, device), i)
            log.batch = 1
            module.on_validation_epoch_end()
    finally:
        del module.log
        module.train(was_training)
    out = {}
    for name in log.calls:
        try:
            out[name] = log.reduce(name)
        except (TypeError, ValueError):
            out[name] = None
    return out


class Validation:
    """A job's metric target, as its worker evaluates it: the named metric every ``every`` processed batches."""

    def __init__(self, loader, metric: str, every: int):
        self.loader, self.metric, self.every = fixed_order(loader), metric, int(every)

    def due(self, processed: int) -> bool:
        return processed > 0 and processed % self.every == 0

    def value(self, module, device: torch.device) -> float:
        """The metric's value after a full pass; ValueError naming it when the pass does not log it as a number."""
        logged = validate(module, self.loader, device)
        if logged.get(self.metric) is None:
            raise ValueError(
                f"validation_step did not log metric {self.metric!r} as a number"
                f" (logged: {', '.join(sorted(logged)) or 'nothing'})"
            )
        value = logged[self.metric]
        return value if math.isfinite(value) else float("nan")
