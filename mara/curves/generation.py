"""Curve-bank generation: plan (family, split, index) jobs, train each with Lightning, write one shard per job, merge.

A job's recipe (seed, batch size, lr) is a pure function of (family, split, index, attempt); the
seed fixes model init and data order. Jobs are sharded over worker processes (CPU: single-thread
workers; GPU: one process per device) or, under torchrun/SLURM, rank r takes jobs r::world_size.
Finished jobs are Parquet shards in ``shard_dir`` and are skipped on restart; runs whose loss turns
non-finite are logged to ``shard_dir/failures.jsonl`` and retried with the next attempt's recipe.
"""
from __future__ import annotations

import hashlib
import json
import logging
import math
import os
import platform
import subprocess
import sys
import time
import warnings
from dataclasses import asdict, dataclass, field
from datetime import datetime, timezone
from pathlib import Path

import numpy as np

from mara.curves.bank import SPLITS, load_bank, merge_tables, write_bank
from mara.curves.families import (
    ALL_FAMILIES,
    DOMAIN_BATCH_SIZES,
    FAMILY_DOMAIN,
    ID_FAMILIES,
    LR_RANGE,
    PAPER_FAMILY_PARAMS,
    generation_cap,
)
from mara.curves.fidelity import family_fidelity
from mara.curves.recorder import LossRecorder, MidRunCheckpoint
from tasks_zoo.errors import ZooError

#: cheapest first (seconds per curve at the default cap, 1 CPU thread, measured; see tasks_zoo/README.md)
COST_ORDER = (
    "TSFM_Audio_1",
    "TSFM_Audio_2",
    "ALSTM_Text_1",
    "LSTM_Cifar10",
    "CNN_Cifar10",
    "RLExpertConfig",
    "ViT_Cifar10_1",
    "ALSTM_Text_2",
    "ResNet18_Cifar10",
    "ResNet34_Cifar10",
)
#: rough uncontended seconds per curve, used for the ETA when a family has no finished shard to learn from
COST_GUESS_S = dict(zip(COST_ORDER, (10, 16, 25, 35, 45, 90, 150, 170, 130, 240)))
GROUP_ORDER = ("pool", "fm_val", "fm_train")
SOURCES = ("real", "synthetic")


@dataclass(frozen=True)
class Job:
    """One training run: a family's ``index``-th curve of ``split`` on data ``source``."""

    family: str
    split: str
    index: int
    source: str

    @property
    def curve_id(self) -> str:
        return f"{self.family}/{self.source}/{self.split}/{self.index:04d}"

    @property
    def shard_name(self) -> str:
        return self.curve_id.replace("/", "__") + ".parquet"


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


def derive_seed(*parts) -> int:
    """Stable 31-bit seed from the parts' text (sha256)."""
    digest = hashlib.sha256("|".join(str(p) for p in parts).encode()).digest()
    return int.from_bytes(digest[:4], "little") & 0x7FFFFFFF


def _user_config(family: str):
    """The zoo config of a family that is not one of the paper's ten (added with a YAML, tasks_zoo/README.md)."""
    from tasks_zoo.configs import load_zoo_config

    return load_zoo_config(family)


def batch_size_choices(family: str) -> tuple[int, ...]:
    """A family's batch-size set: its domain's (A.2), or a user family's ``batch_sizes`` (else its domain's)."""
    if family in FAMILY_DOMAIN:
        return DOMAIN_BATCH_SIZES[FAMILY_DOMAIN[family]]
    cfg = _user_config(family)
    if "batch_sizes" in cfg:
        return tuple(int(b) for b in cfg.batch_sizes)
    if cfg.get("domain") in DOMAIN_BATCH_SIZES:
        return DOMAIN_BATCH_SIZES[cfg.domain]
    raise ZooError(f"zoo family {family}: give batch_sizes or a domain ({', '.join(DOMAIN_BATCH_SIZES)}) in its config")


def in_distribution(family: str) -> bool:
    """Does the family take part in the FM data set (fm_val / fm_train curves)? Paper: the ID families; a user
    family unless its config says ``ood: true``."""
    if family in ALL_FAMILIES:
        return family in ID_FAMILIES
    return not bool(_user_config(family).get("ood", False))


def family_cap(family: str) -> int:
    """Batches per curve: twice the largest budget (A.2); a user family's ``cap`` from its config."""
    if family in ALL_FAMILIES:
        return generation_cap(family)
    cfg = _user_config(family)
    if "cap" not in cfg:
        raise ZooError(f"zoo family {family}: its config needs a cap (batches per curve), or run with cap=N")
    return int(cfg.cap)


def job_recipe(job: Job, attempt: int = 0) -> tuple[int, int, float]:
    """(seed, batch_size, lr): batch size uniform over the domain's set, lr log-uniform on LR_RANGE (A.2)."""
    seed = derive_seed(job.family, job.split, job.index, attempt)
    rng = np.random.default_rng(seed)
    choices = batch_size_choices(job.family)
    batch_size = int(choices[int(rng.integers(len(choices)))])
    lr = float(math.exp(rng.uniform(math.log(LR_RANGE[0]), math.log(LR_RANGE[1]))))
    return seed, batch_size, lr


def check_request(families, counts: dict, source: str, source_overrides: dict | None = None) -> list[str]:
    """Validate families / counts / sources; returns the family list. Raises ZooError (one line)."""
    if families in (None, "all", ["all"]):
        families = list(ALL_FAMILIES)
    if isinstance(families, str):
        families = [f.strip() for f in families.split(",") if f.strip()]
    families = list(families)
    from tasks_zoo.configs import known_families

    known = list(ALL_FAMILIES) + [f for f in known_families() if f not in ALL_FAMILIES]  # + families added by a YAML
    unknown = [f for f in families if f not in known]
    if unknown:
        raise ZooError(f"unknown famil{'y' if len(unknown) == 1 else 'ies'} {', '.join(unknown)} (known: {', '.join(known)})")
    bad_splits = [s for s in counts if s not in SPLITS]
    if bad_splits:
        raise ZooError(f"unknown split(s) {', '.join(bad_splits)} in counts (known: {', '.join(SPLITS)})")
    for s in [source, *(source_overrides or {}).values()]:
        if s not in SOURCES:
            raise ZooError(f"unknown source {s!r} (use one of: {', '.join(SOURCES)})")
    bad_over = [f for f in (source_overrides or {}) if f not in known]
    if bad_over:
        raise ZooError(f"source_overrides names unknown famil{'y' if len(bad_over) == 1 else 'ies'} {', '.join(bad_over)}")
    return families


def plan_jobs(families, counts: dict, source: str = "synthetic", source_overrides: dict | None = None) -> list[Job]:
    """All jobs, usable-bank-first: pool of every family, then fm_val, then fm_train; cheapest family first in each."""
    families = check_request(families, counts, source, source_overrides)
    ordered = sorted(families, key=lambda f: COST_ORDER.index(f) if f in COST_ORDER else len(COST_ORDER))
    jobs = []
    for split in GROUP_ORDER:
        for fam in ordered:
            if split != "pool" and not in_distribution(fam):
                continue  # the FM dataset holds ID families only (A.2)
            src = (source_overrides or {}).get(fam, source)
            jobs.extend(Job(fam, split, i, src) for i in range(int(counts.get(split, 0))))
    return jobs


def _quiet_lightning() -> None:
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


def train_curve(job: Job, settings: GenerationSettings, attempt: int = 0, device_index: int | None = None) -> tuple[dict | None, str | None]:
    """Train one run with a Lightning Trainer (``trainer.fit(task, datamodule=dm)``); returns (bank record, None) or
    (None, failure reason). With ``settings.checkpoint_every`` = n > 0 the run checkpoints every n batches and a killed
    run resumes from its checkpoint exactly (model, Adam, the loss record so far and the loader's mid-epoch position)."""
    import lightning as L
    import torch

    from tasks_zoo.registry import build_run, data_order, load_zoo_config

    _quiet_lightning()
    cap = int(settings.cap or family_cap(job.family))
    seed, batch_size, lr = job_recipe(job, attempt)
    module, dm = build_run(job.family, seed=seed, batch_size=batch_size, lr=lr, source=job.source,
                           data_root=settings.data_root, cache_dir=settings.cache_dir, download=settings.download)
    recorder = LossRecorder()
    callbacks = [recorder]
    ckpt = partial_checkpoint(job, settings, attempt)
    if settings.checkpoint_every:
        callbacks.append(MidRunCheckpoint(ckpt, int(settings.checkpoint_every)))
    resume = str(ckpt) if settings.checkpoint_every and ckpt.is_file() else None
    devices = [device_index] if (device_index is not None and settings.accelerator not in ("cpu",)) else 1
    trainer = L.Trainer(
        accelerator=settings.accelerator, devices=devices, max_steps=cap, max_epochs=-1, logger=False,
        enable_checkpointing=False, enable_progress_bar=False, enable_model_summary=False, callbacks=callbacks,
        use_distributed_sampler=False, num_sanity_val_steps=0, limit_val_batches=0, precision="32-true",
    )
    t0, c0 = time.perf_counter(), time.process_time()
    trainer.fit(module, datamodule=dm, ckpt_path=resume, weights_only=True)  # its own checkpoint, still read as data
    wall, cpu = time.perf_counter() - t0, time.process_time() - c0  # cpu: this process's CPU time, all its threads
    if recorder.failure:
        return None, recorder.failure
    if len(recorder.losses) != cap:
        return None, f"recorded {len(recorder.losses)} batches, expected {cap}"
    device = "cpu" if settings.accelerator == "cpu" else (torch.cuda.get_device_name(device_index or 0) if torch.cuda.is_available() else settings.accelerator)
    meta = {
        "code_version": settings.code_version, "torch_version": torch.__version__, "lightning_version": L.__version__,
        "device": device, "threads": torch.get_num_threads(), "wall_time_s": round(wall, 3),
        "cpu_time_s": round(cpu, 3), "cpu_capability": torch.backends.cpu.get_cpu_capability(),  # e.g. AVX2 / AVX512
        "created_at": datetime.now(timezone.utc).isoformat(timespec="seconds"), "host": platform.node(),
        "source": f"tasks_zoo:{job.family} ({job.source} data)", "attempt": attempt, "cap": cap,
        "data_order": data_order(load_zoo_config(job.family)),
        **({"resumed_from_batch": recorder.resumed_at} if recorder.resumed_at else {}),  # wall/cpu time: after it
        **settings.extra_meta,
    }
    record = {"curve_id": job.curve_id, "family": job.family, "split": job.split, "data_source": job.source,
              "batch_size": batch_size, "lr": lr, "seed": seed, "losses": recorder.losses, "meta": meta}
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
        _log_failure(shard_dir, {"curve_id": job.curve_id, "attempt": attempt, "seed": seed, "batch_size": batch_size,
                                 "lr": lr, "reason": reason, "at": datetime.now(timezone.utc).isoformat(timespec="seconds")})
    return {"job": asdict(job), "status": "failed", "seconds": time.perf_counter() - t0}


# ---- worker processes -------------------------------------------------------------------------

_WORKER: dict = {}


def _worker_init(settings: GenerationSettings, device_queue) -> None:
    import torch

    torch.set_num_threads(1)
    _WORKER["settings"] = settings
    _WORKER["device"] = device_queue.get() if device_queue is not None else None


def _worker_run(job: Job) -> dict:
    try:
        return run_job(job, _WORKER["settings"], _WORKER["device"])
    except ZooError as exc:
        return {"job": asdict(job), "status": "error", "error": str(exc), "seconds": 0.0}


def world_from_env() -> tuple[int, int, int | None]:
    """(rank, world_size, local device index) under torchrun (RANK/WORLD_SIZE) or SLURM (SLURM_PROCID/NTASKS)."""
    env = os.environ
    if "WORLD_SIZE" in env and int(env["WORLD_SIZE"]) > 1:
        return int(env.get("RANK", 0)), int(env["WORLD_SIZE"]), int(env.get("LOCAL_RANK", 0))
    if "SLURM_NTASKS" in env and int(env["SLURM_NTASKS"]) > 1:
        return int(env.get("SLURM_PROCID", 0)), int(env["SLURM_NTASKS"]), int(env.get("SLURM_LOCALID", 0))
    return 0, 1, None


def code_version() -> str:
    """Package version plus git commit (if any) of the working tree."""
    root = Path(__file__).resolve().parents[2]
    try:
        rev = subprocess.run(["git", "-C", str(root), "rev-parse", "--short", "HEAD"], capture_output=True, text=True, timeout=5)
        commit = rev.stdout.strip() if rev.returncode == 0 else "uncommitted"
    except Exception:
        commit = "unknown"
    try:
        from importlib.metadata import version

        pkg = version("mara")
    except Exception:
        pkg = "0"
    return f"mara-{pkg}+{commit}"


class _Reporter:
    """Progress: rich bar with ETA on a terminal, one plain line per finished job otherwise."""

    def __init__(self, jobs: list[Job], parallel: int, quiet: bool = False, prior: dict | None = None):
        from rich.console import Console

        self.pending = {j: None for j in jobs}
        self.parallel, self.quiet, self.seen = max(1, parallel), quiet, {}
        self.prior = dict(prior or {})
        self.console = Console(stderr=True)
        self.n, self.done, self.t0 = len(jobs), 0, time.time()
        self.progress = None
        if self.console.is_terminal and not quiet:
            from rich.progress import (
                BarColumn,
                MofNCompleteColumn,
                Progress,
                TextColumn,
                TimeElapsedColumn,
            )

            self.progress = Progress(TextColumn("[bold]curves"), BarColumn(), MofNCompleteColumn(), TimeElapsedColumn(),
                                     TextColumn("eta {task.fields[eta]} · {task.fields[last]}"), console=self.console)
            self.task = self.progress.add_task("gen", total=self.n, eta="?", last="")
            self.progress.start()

    def eta_seconds(self) -> float:
        def est(fam):
            s = self.seen.get(fam)
            if s:
                return sum(s) / len(s)
            return self.prior.get(fam, COST_GUESS_S.get(fam, 600))

        return sum(est(j.family) for j in self.pending) / self.parallel

    def update(self, result: dict) -> None:
        job = Job(**result["job"])
        self.pending.pop(job, None)
        self.done += 1
        if result["status"] == "done":
            self.seen.setdefault(job.family, []).append(result["seconds"])
        eta = _fmt(self.eta_seconds())
        last = f"{job.curve_id} {result['status']} {result['seconds']:.1f}s"
        if result["status"] == "error":
            last += f" ({result['error']})"
        if self.progress is not None:
            self.progress.update(self.task, advance=1, eta=eta, last=last)
        elif not self.quiet:
            stamp = datetime.now().strftime("%H:%M:%S")
            print(f"{stamp} [{self.done}/{self.n}] {last} | eta {eta}", file=sys.stderr, flush=True)

    def close(self) -> None:
        if self.progress is not None:
            self.progress.stop()


def measured_seconds(shard_dir: str | os.PathLike, families, accelerator: str = "cpu", per_family: int = 20) -> dict:
    """Mean recorded wall time per curve of each family's finished shards (same accelerator), for the ETA."""
    import pyarrow.parquet as pq

    out = {}
    for fam in families:
        times = []
        for path in sorted(Path(shard_dir).glob(f"{fam}__*.parquet"))[-per_family:]:
            try:
                meta = pq.read_table(path, columns=["meta"]).column("meta")[0].as_py()
                meta = json.loads(meta) if isinstance(meta, str) else meta
            except Exception:
                continue
            if (meta.get("device", "cpu") == "cpu") == (accelerator == "cpu") and meta.get("wall_time_s"):
                times.append(float(meta["wall_time_s"]))
        if times:
            out[fam] = sum(times) / len(times)
    return out


def _fmt(seconds: float) -> str:
    h, rem = divmod(int(seconds), 3600)
    return f"{h}h{rem // 60:02d}m" if h else f"{rem // 60}m{rem % 60:02d}s"


def prepare_real_data(jobs: list[Job], settings: GenerationSettings) -> None:
    """Find (and unpack or download once) every real data set the jobs need, before any worker starts:
    missing data stops here with one line, and workers never unpack the same archive side by side."""
    from tasks_zoo.registry import build_datamodule

    seen = set()
    for fam in sorted({j.family for j in jobs if j.source == "real"}):
        dm = build_datamodule(fam, seed=0, batch_size=1, source="real", data_root=settings.data_root,
                              cache_dir=settings.cache_dir, download=settings.download)
        if (type(dm), dm.archive) not in seen:  # each data set once
            seen.add((type(dm), dm.archive))
            dm.prepare_data()


def generate(families="all", counts: dict | None = None, *, shard_dir: str | os.PathLike, cap: int | None = None,
             source: str = "synthetic", source_overrides: dict | None = None, workers: int = 1,
             accelerator: str = "cpu", devices: int = 1, data_root: str = "data_cache", cache_dir: str = "data_cache",
             download: bool = False, max_attempts: int = 3, quiet: bool = False, checkpoint_every: int = 0) -> list[dict]:
    """Run every unfinished job of the plan (this rank's share under torchrun/SLURM); returns per-job status dicts."""
    counts = dict(counts or {"pool": 30, "fm_val": 10, "fm_train": 50})
    jobs = plan_jobs(families, counts, source, source_overrides)
    shard_dir = Path(shard_dir)
    shard_dir.mkdir(parents=True, exist_ok=True)
    rank, world, local = world_from_env()
    jobs = jobs[rank::world]
    todo = [j for j in jobs if not (shard_dir / j.shard_name).exists()]
    settings = GenerationSettings(shard_dir=str(shard_dir), cap=cap, data_root=str(data_root), cache_dir=str(cache_dir),
                                  download=bool(download), accelerator=accelerator, max_attempts=int(max_attempts),
                                  code_version=code_version(), checkpoint_every=int(checkpoint_every or 0))
    prepare_real_data(todo, settings)
    gpu = accelerator not in ("cpu",)
    nproc = 1 if world > 1 else (int(devices) if gpu else int(workers))
    if not quiet:
        print(f"generate: {len(jobs)} jobs, {len(jobs) - len(todo)} already done, {len(todo)} to run on "
              f"{nproc} {'device process' if gpu else 'worker'}{'es' if nproc > 1 and gpu else 's' if nproc > 1 else ''} "
              f"(rank {rank}/{world}) -> {shard_dir}", file=sys.stderr, flush=True)
    prior = measured_seconds(shard_dir, sorted({j.family for j in todo}), accelerator)
    reporter = _Reporter(todo, nproc, quiet, prior)
    results = []
    try:
        if nproc <= 1:
            import torch

            if not gpu:
                torch.set_num_threads(1)
            dev = local if gpu else None
            for job in todo:
                res = run_job(job, settings, dev if dev is not None else (0 if gpu else None))
                results.append(res)
                reporter.update(res)
        else:
            import multiprocessing as mp

            # CPU: fork (workers inherit the imported modules; torch re-inits its pools after fork);
            # GPU: spawn (CUDA cannot be used in forked children)
            ctx = mp.get_context("spawn" if gpu or "fork" not in mp.get_all_start_methods() else "fork")
            queue = ctx.Queue()
            for i in range(nproc):
                queue.put(i if gpu else None)
            with ctx.Pool(nproc, initializer=_worker_init, initargs=(settings, queue)) as pool:
                for res in pool.imap_unordered(_worker_run, todo, chunksize=1):
                    if res["status"] == "error":
                        raise ZooError(res["error"])
                    results.append(res)
                    reporter.update(res)
    finally:
        reporter.close()
    return results


def merge(shard_dir: str | os.PathLike, out_path: str | os.PathLike, tensorboard_dir: str | os.PathLike | None = None,
          extra_meta: dict | None = None, jobs: list[Job] | None = None) -> Path:
    """Merge shards into one bank (rows sorted by curve_id) with provenance metadata; optional TensorBoard plots.

    ``jobs``: merge only these jobs' shards (those that exist), so a plan's bank never picks up shards of another
    plan lying in the same folder (e.g. synthetic stand-ins beside real-data curves); None merges every shard.
    """
    import torch

    shard_dir = Path(shard_dir)
    if jobs is None:
        paths = sorted(shard_dir.glob("*.parquet"))
    else:
        paths = sorted(p for p in (shard_dir / j.shard_name for j in jobs) if p.exists())
    if not paths:
        raise ZooError(f"no shards to merge in {shard_dir}")
    table = merge_tables(paths)
    table = table.take(np.argsort(np.array(table.column("curve_id").to_pylist(), dtype=object)))
    fams, splits, srcs = (table.column(c).to_pylist() for c in ("family", "split", "data_source"))
    composition: dict = {}
    for f, s in zip(fams, splits):
        composition.setdefault(f, {}).setdefault(s, 0)
        composition[f][s] += 1
    failures = shard_dir / "failures.jsonl"
    bank_meta = {
        "generator": "mara.generate_curves", "code_version": code_version(), "torch_version": torch.__version__,
        "created_at": datetime.now(timezone.utc).isoformat(timespec="seconds"), "n_curves": table.num_rows,
        "composition": composition, "data_sources": sorted(set(srcs)),
        "failed_runs": sum(1 for _ in open(failures)) if failures.exists() else 0, **(extra_meta or {}),
    }
    out = write_bank(out_path, table, bank_meta)
    if tensorboard_dir:
        plot_bank_to_tensorboard(out, tensorboard_dir)
    return out


def _plot_family(ax, bank, fam: str) -> None:
    """Cumulative-average loss L of each curve of ``fam`` (coloured by split), with the calibrated target ε
    (black dashed line, or grey band for an ε range), Table 6's ε (purple dotted, or purple band), the budget
    range (shaded red) when the bank carries them, and a caption: both ε and the mean final L of the pool curves."""

    for r in bank.rows(fam):
        ax.plot(np.arange(1, bank.lengths[r] + 1), bank.L[r, : bank.lengths[r]], lw=0.6, alpha=0.6,
                color={"pool": "C0", "fm_val": "C1", "fm_train": "C2"}[bank.split[r]])
    fp = (bank.family_params or {}).get(fam, {})
    if "eps" in fp:
        ax.axhline(fp["eps"], color="k", ls="--", lw=1)
    elif "eps_range" in fp:
        ax.axhspan(*fp["eps_range"], color="k", alpha=0.12)
    paper = PAPER_FAMILY_PARAMS.get(fam, {})
    if "eps" in paper:
        ax.axhline(paper["eps"], color="C4", ls=":", lw=1.2)
    elif "eps_range" in paper:
        ax.axhspan(*paper["eps_range"], color="C4", alpha=0.18)
    budgets = fp.get("budget") or fp.get("budget_set")
    if budgets:
        ax.axvspan(min(budgets), max(budgets), color="C3", alpha=0.12)
    if len(bank.rows(fam, "pool")):
        f = family_fidelity(bank, fam)
        ax.text(0.02, 0.03, f"ε bank {f['eps_calibrated']}\nε paper {f['eps_paper']}\nfinal L {f['final_L']:.3g}",
                transform=ax.transAxes, fontsize=6.5, va="bottom", ha="left",
                bbox=dict(boxstyle="round,pad=0.2", fc="white", ec="0.7", alpha=0.8))
    ax.set(title=f"{fam} ({len(bank.rows(fam))} curves)", xlabel="batch", ylabel="cumulative-average loss", xscale="log")


def plot_bank_to_tensorboard(bank_path, log_dir) -> None:
    """One TensorBoard figure per family (see ``_plot_family``)."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt
    from torch.utils.tensorboard import SummaryWriter

    bank = load_bank(bank_path)
    writer = SummaryWriter(str(log_dir))
    for fam in bank.families:
        fig, ax = plt.subplots(figsize=(6, 4))
        _plot_family(ax, bank, fam)
        writer.add_figure(f"curves/{fam}", fig)
        plt.close(fig)
    writer.close()


def plot_bank_grid(bank_path, png_path) -> Path:
    """All families of a bank in one PNG: curves by split (pool blue, fm_val orange, fm_train green), calibrated
    ε dashed black (or grey band), Table 6's ε dotted purple (or purple band), budget range shaded red."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    bank = load_bank(bank_path)
    fams = bank.families
    ncol = min(5, len(fams))
    nrow = -(-len(fams) // ncol)
    fig, axes = plt.subplots(nrow, ncol, figsize=(3.4 * ncol, 2.8 * nrow), squeeze=False)
    for ax, fam in zip(axes.flat, fams):
        _plot_family(ax, bank, fam)
        ax.title.set_fontsize(9)
        ax.set_xlabel("batch", fontsize=8)
        ax.set_ylabel("")
    for ax in list(axes.flat)[len(fams):]:
        ax.axis("off")
    fig.supylabel("cumulative-average loss", x=0.005)
    fig.tight_layout(rect=(0.012, 0, 1, 1))
    png_path = Path(png_path)
    png_path.parent.mkdir(parents=True, exist_ok=True)
    fig.savefig(png_path, dpi=110)
    plt.close(fig)
    return png_path
