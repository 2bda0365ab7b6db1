"""Merging a generation's shards into one bank (rows sorted by curve id) with its provenance metadata."""

from __future__ import annotations

import os
from datetime import datetime, timezone
from pathlib import Path

import numpy as np

from mara.curves.bank import merge_tables, write_bank
from mara.curves.plan import Job
from mara.curves.plots import plot_bank_to_tensorboard
from mara.curves.training import code_version
from tasks_zoo.errors import ZooError


def merge(
    shard_dir: str | os.PathLike,
    out_path: str | os.PathLike,
    tensorboard_dir: str | os.PathLike | None = None,
    extra_meta: dict | None = None,
    jobs: list[Job] | None = None,
) -> Path:
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
        "generator": "mara.generate_curves",
        "code_version": code_version(),
        "torch_version": torch.__version__,
        "created_at": datetime.now(timezone.utc).isoformat(timespec="seconds"),
        "n_curves": table.num_rows,
        "composition": composition,
        "data_sources": sorted(set(srcs)),
        "failed_runs": sum(1 for _ in open(failures)) if failures.exists() else 0,
        **(extra_meta or {}),
    }
    out = write_bank(out_path, table, bank_meta)
    if tensorboard_dir:
        plot_bank_to_tensorboard(out, tensorboard_dir)
    return out
