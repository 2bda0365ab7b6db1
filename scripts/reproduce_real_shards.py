"""Regenerate shipped real-data bank curves with the current code path (DataModule + stateful loader) and compare
them with the shards: the bank is reproducible batch for batch (docs/banks.md).

    PYTHONPATH=$PWD OMP_NUM_THREADS=1 python scripts/reproduce_real_shards.py TSFM_Audio_1 pool 0 1 2 3

Data sets are read from ``$MARA_DATA_ROOT`` (default ``../shared/data`` next to the repository).

Prints, per curve, the recipe, the number of batches compared, how many are bit-for-bit equal, and the max abs
difference per batch between the regenerated and the shipped losses.
"""

import json
import os
import sys
import tempfile
from pathlib import Path

import numpy as np
import pyarrow.parquet as pq
import torch

from mara.curves import generation as gen

SHARDS = Path("data/zoo_bank/shards")
DATA = Path(os.environ.get("MARA_DATA_ROOT", Path(__file__).resolve().parents[2] / "shared" / "data"))


def main(family: str, split: str, indices: list[int]) -> None:
    torch.set_num_threads(1)
    settings = gen.GenerationSettings(shard_dir=tempfile.gettempdir(), data_root=str(DATA), cache_dir="data_cache")
    for i in indices:
        job = gen.Job(family, split, i, "real")
        shipped = pq.read_table(SHARDS / job.shard_name).to_pylist()[0]
        meta = json.loads(shipped["meta"]) if isinstance(shipped["meta"], str) else shipped["meta"]
        record, reason = gen.train_curve(job, settings, int(meta.get("attempt", 0)))
        assert record is not None, reason
        assert (record["seed"], record["batch_size"]) == (shipped["seed"], shipped["batch_size"])
        a, b = np.asarray(record["losses"]), np.asarray(shipped["losses"])
        n = min(len(a), len(b))
        d = np.abs(a[:n] - b[:n])
        print(
            f"{job.curve_id} seed={record['seed']} bs={record['batch_size']} lr={record['lr']:.3g} batches={n} "
            f"bitwise_equal={int((a[:n] == b[:n]).sum())}/{n} max_abs_diff={d.max():.3g}",
            flush=True,
        )


if __name__ == "__main__":
    if len(sys.argv) < 4 or sys.argv[1] in ("-h", "--help"):
        raise SystemExit(__doc__)
    main(sys.argv[1], sys.argv[2], [int(x) for x in sys.argv[3:]])
