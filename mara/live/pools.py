"""The worker pool a live run names (``live.workers``: inline | process | ray), with its options from ``live``."""

from __future__ import annotations

from mara.live.ray_pool import RayPool
from mara.live.workers import InlinePool, ProcessPool


def pool_options(device, threads, crash: dict | None, ray_cfg: dict | None) -> dict:
    """:func:`make_pool`'s options from the ``live`` block's values: the device, threads per worker, the crash plan
    (``{job: step}``, ints) and Ray's settings."""
    crash = {int(k): int(v) for k, v in (crash or {}).items()}
    return {"device": str(device), "threads": int(threads), "crash": crash, "ray_cfg": ray_cfg}


def make_pool(
    kind: str, *, device: str = "cpu", threads: int = 1, crash: dict | None = None, ray_cfg: dict | None = None
):
    """The worker pool named by ``live.workers``: inline | process | ray (``ray_cfg``: ``live.ray``)."""
    if kind == "inline":
        return InlinePool(device, crash)
    if kind == "process":
        return ProcessPool(device, threads, crash)
    if kind == "ray":
        r = ray_cfg or {}
        return RayPool(
            r.get("address"),
            float(r.get("cpus_per_job", 1.0)),
            float(r.get("gpus_per_job", 0.0)),
            crash,
            threads,
            num_cpus=r.get("num_cpus"),
            num_gpus=r.get("num_gpus"),
            checkpoint_every=int(r.get("checkpoint_every", 10)),
            checkpoint_dir=r.get("checkpoint_dir"),
            start_timeout_s=float(r.get("start_timeout_s", 300.0)),
        )
    raise ValueError(f"live.workers must be inline, process or ray, got {kind!r}")
