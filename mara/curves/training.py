"""One generation job: train its run with Lightning (retrying a non-finite run with the next attempt's recipe) and write
its Parquet shard; failed attempts go to ``shard_dir/failures.jsonl``, a run in progress can checkpoint and resume."""

from __future__ import annotations

import json
import logging
import platform
import subprocess
import time
import warnings
from dataclasses import asdict, dataclass, field
from datetime import datetime, timezone
from pathlib import Path

from mara.curves.bank import write_bank
from mara.curves.plan import Job, family_cap, job_recipe
from mara.curves.recorder import LossRecorder, MidRunCheckpoint


@dataclass
class GenerationSettings:
    """Everything a worker needs besides the job."""

    shard_dir: str
    cap: int | None = None  # None: generation_cap(family)
    data_root: str = "data_cache"
    cache_dir: str = "data_cache"
    download: bool = False
    accelerator: str = "cpu"
    max_attempts: int = 3
    code_version: str = "unknown"
    checkpoint_every: int = 0  # > 0: checkpoint a run every n batches under shard_dir/partial/ and resume from it
    extra_meta: dict = field(default_factory=dict)


def code_version() -> str:
    """Package version plus git commit (if any) of the working tree."""
    root = Path(__file__).resolve().parents[2]
    try:
        rev = subprocess.run(
            ["git", "-C", str(root), "rev-parse", "--short", "HEAD"], capture_output=True, text=True, timeout=5
        )
        commit = rev.stdout.strip() if rev.returncode == 0 else "uncommitted"
    except Exception:
        commit = "unknown"
    try:
        from importlib.metadata import version

        pkg = version("mara")
    except Exception:
        pkg = "0"
    return f"mara-{pkg}+{commit}"


def _quiet_lightning() -> None:
    import lightning  # noqa: F401  (imported first: its import sets the levels quieted here)

    for name in ("lightning", "lightning.pytorch", "lightning.fabric", "pytorch_lightning"):
        logging.getLogger(name).setLevel(logging.ERROR)
    warnings.filterwarnings("ignore", ".*does not have many workers.*")
    warnings.filterwarnings("ignore", ".*")


def _log_failure(shard_dir: Path, record: dict) -> None:
    with open(shard_dir / "failures.jsonl", "a", encoding="utf-8") as fh:
        fh.write(json.dumps(record, sort_keys=True) + "\n")


def partial_checkpoint(job: Job, settings: GenerationSettings, attempt: int) -> Path:
    """Where a run in progress keeps its mid-run checkpoint (``checkpoint_every`` > 0)."""
    return Path(settings.shard_dir) / "partial" / f"{job.shard_name.removesuffix('.parquet')}.attempt{attempt}.ckpt"


def _trainer(settings: GenerationSettings, cap: int, callbacks: list, device_index: int | None):
    """A Lightning Trainer that runs exactly ``cap`` training batches and nothing else (no validation, logging or
    checkpointing of its own), in full float32 precision."""
    import lightning as L

    devices = [device_index] if (device_index is not None and settings.accelerator not in ("cpu",)) else 1
    return L.Trainer(
        accelerator=settings.accelerator,
        devices=devices,
        max_steps=cap,
        max_epochs=-1,
        logger=False,
        enable_checkpointing=False,
        enable_progress_bar=False,
        enable_model_summary=False,
        callbacks=callbacks,
        use_distributed_sampler=False,
        num_sanity_val_steps=0,
        limit_val_batches=0,
        precision="32-true",
    )


def _run_meta(job: Job, settings: GenerationSettings, attempt: int, cap: int, recorder, wall, cpu, device_index):
    """The record's ``meta``: the versions, device and threads the run used, its wall and CPU time and its origin."""
    import lightning as L
    import torch

    from tasks_zoo.registry import data_order, load_zoo_config

    device = (
        "cpu"
        if settings.accelerator == "cpu"
        else (torch.cuda.get_device_name(device_index or 0) if torch.cuda.is_available() else settings.accelerator)
    )
    return {
        "code_version": settings.code_version,
        "torch_version": torch.__version__,
        "lightning_version": L.__version__,
        "device": device,
        "threads": torch.get_num_threads(),
        "wall_time_s": round(wall, 3),
        "cpu_time_s": round(cpu, 3),
        "cpu_capability": torch.backends.cpu.get_cpu_capability(),  # e.g. AVX2 / AVX512
        "created_at": datetime.now(timezone.utc).isoformat(timespec="seconds"),
        "host": platform.node(),
        "source": f"tasks_zoo:{job.family} ({job.source} data)",
        "attempt": attempt,
        "cap": cap,
        "data_order": data_order(load_zoo_config(job.family)),
        **({"resumed_from_batch": recorder.resumed_at} if recorder.resumed_at else {}),  # wall/cpu time: after it
        **settings.extra_meta,
    }


def train_curve(
    job: Job, settings: GenerationSettings, attempt: int = 0, device_index: int | None = None
) -> tuple[dict | None, str | None]:
    """Train one run with a Lightning Trainer (``trainer.fit(task, datamodule=dm)``); returns (bank record, None) or
    (None, failure reason). With ``settings.checkpoint_every`` = n > 0 the run checkpoints every n batches and a killed
    run resumes from its checkpoint exactly (model, Adam, the loss record so far and the loader's mid-epoch
    position)."""
    from tasks_zoo.registry import build_run

    _quiet_lightning()
    cap = int(settings.cap or family_cap(job.family))
    seed, batch_size, lr = job_recipe(job, attempt)
    module, dm = build_run(
        job.family,
        seed=seed,
        batch_size=batch_size,
        lr=lr,
        source=job.source,
        data_root=settings.data_root,
        cache_dir=settings.cache_dir,
        download=settings.download,
    )
    recorder = LossRecorder()
    callbacks = [recorder]
    ckpt = partial_checkpoint(job, settings, attempt)
    if settings.checkpoint_every:
        callbacks.append(MidRunCheckpoint(ckpt, int(settings.checkpoint_every)))
    resume = str(ckpt) if settings.checkpoint_every and ckpt.is_file() else None
    trainer = _trainer(settings, cap, callbacks, device_index)
    t0, c0 = time.perf_counter(), time.process_time()
    trainer.fit(module, datamodule=dm, ckpt_path=resume, weights_only=True)  # its own checkpoint, still read as data
    wall, cpu = time.perf_counter() - t0, time.process_time() - c0  # cpu: this process's CPU time, all its threads
    if recorder.failure:
        return None, recorder.failure
    if len(recorder.losses) != cap:
        return None, f"recorded {len(recorder.losses)} batches, expected {cap}"
    meta = _run_meta(job, settings, attempt, cap, recorder, wall, cpu, device_index)
    record = {
        "curve_id": job.curve_id,
        "family": job.family,
        "split": job.split,
        "data_source": job.source,
        "batch_size": batch_size,
        "lr": lr,
        "seed": seed,
        "losses": recorder.losses,
        "meta": meta,
    }
    ckpt.unlink(missing_ok=True)
    return record, None


def run_job(job: Job, settings: GenerationSettings, device_index: int | None = None) -> dict:
    """Train a job (retrying non-finite runs with the next attempt), write its shard; returns a status dict."""
    shard_dir = Path(settings.shard_dir)
    path = shard_dir / job.shard_name
    if path.exists():
        return {"job": asdict(job), "status": "skipped", "seconds": 0.0}
    t0 = time.perf_counter()
    for attempt in range(settings.max_attempts):
        record, reason = train_curve(job, settings, attempt, device_index)
        if record is not None:
            write_bank(path, [record], {"generator": "mara.generate_curves", "shard_of": job.curve_id})
            return {"job": asdict(job), "status": "done", "seconds": time.perf_counter() - t0, "attempt": attempt}
        seed, batch_size, lr = job_recipe(job, attempt)
        _log_failure(
            shard_dir,
            {
                "curve_id": job.curve_id,
                "attempt": attempt,
                "seed": seed,
                "batch_size": batch_size,
                "lr": lr,
                "reason": reason,
                "at": datetime.now(timezone.utc).isoformat(timespec="seconds"),
            },
        )
    return {"job": asdict(job), "status": "failed", "seconds": time.perf_counter() - t0}
