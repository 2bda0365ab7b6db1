"""Live jobs on a Ray cluster (``live.workers=ray``, ``pip install -e ".[cluster]"``): ``RayPool``, a worker pool
(the calls of :mod:`mara.live.workers`) of one Ray actor per job across every machine of the cluster; each actor
reserves ``cpus_per_job`` CPUs and ``gpus_per_job`` GPUs, so Ray's scheduler places jobs on machines and GPUs (the M
"nodes" are execution slots: the allocator never runs more than M at once). ``check_ray_cluster`` is its check
before any job starts (Ray installed, the address answers, the cluster declares the CPUs and GPUs the jobs reserve).
"""

from __future__ import annotations

import os
import socket
import tempfile
from pathlib import Path

from mara.core.config import ConfigError
from mara.live.job import JobSpec, TrainingJob
from mara.live.workers import NodeStep, WorkerDied, node_step

#: how to install the optional Ray dependency (the ``cluster`` extra)
RAY_HINT = 'pip install -e ".[cluster]"'


def ray_module():
    """The ``ray`` package, or one line saying how to install it."""
    try:
        import ray
    except ImportError:
        raise ConfigError(
            f"live.workers=ray needs Ray, which is not installed: {RAY_HINT} (or live.workers=process)"
        ) from None
    return ray


def _connect(ray, address: str | None, num_cpus: float | None, num_gpus: float | None) -> None:
    """Join the cluster at ``address`` (``auto``: the one ``ray start`` runs on this machine), or start a local one
    declaring ``num_cpus`` CPUs and ``num_gpus`` GPUs (None: what Ray detects); nothing if Ray is already up."""
    if ray.is_initialized():
        return
    local = {} if address else {"num_cpus": num_cpus, "num_gpus": num_gpus}
    ray.init(address=address or None, include_dashboard=False, log_to_driver=False, **local)


def _bootstrap(address: str) -> tuple[str, int]:
    """(host, port) that ``address`` (``host:port``, ``ray://host:port`` or ``auto``) names."""
    where = f"live.ray.address={address}"
    if address == "auto":
        given = os.environ.get("RAY_ADDRESS")
        if given and given != "auto":
            return _bootstrap(given)
        try:
            from ray._private.services import canonicalize_bootstrap_address_or_die
        except ImportError:  # another Ray layout: ray.init finds the cluster (or says why) itself
            return "", 0
        try:
            return _bootstrap(canonicalize_bootstrap_address_or_die("auto"))
        except ConnectionError:
            raise ConfigError(
                f"{where}: no Ray cluster runs on this machine (ray start --head starts one; leave live.ray.address "
                "unset for a local cluster)"
            ) from None
    host, _, port = address.split("://", 1)[-1].rpartition(":")
    if not host or not port.isdigit():
        raise ConfigError(f"{where}: expected host:port (or ray://host:port, or auto), got {address!r}")
    return host, int(port)


def _declared(ray) -> tuple[dict, list[dict]]:
    """The connected cluster's declared resources: (totals, per alive machine)."""
    nodes = [n.get("Resources", {}) for n in ray.nodes() if n.get("Alive", n.get("alive", True))]
    return dict(ray.cluster_resources()), nodes


def _local_gpus() -> int:
    import torch

    return torch.cuda.device_count()


def check_ray_cluster(
    address: str | None,
    cpus_per_job: float,
    gpus_per_job: float,
    max_active: int,
    num_cpus: float | None = None,
    num_gpus: float | None = None,
    timeout_s: float = 5.0,
) -> dict:
    """The check before any job starts on Ray (``live.workers=ray``); a mistake is one ``ConfigError`` line.

    Ray is installed (else how to install it); an ``address`` answers within ``timeout_s`` (a TCP connection to
    its GCS port, then Ray joins it: the check keeps that connection for the run); and the cluster declares the
    resources the jobs reserve. At most ``max_active`` (K) jobs hold an actor at once — an admitted job keeps its
    actor, and so its reservation, while the allocator pauses it — so the cluster's machines must fit K actors of
    ``cpus_per_job`` CPUs and ``gpus_per_job`` GPUs; an actor that does not fit would wait for resources forever.
    A local cluster (no address) declares ``num_cpus`` / ``num_gpus`` (None: this machine's), so declared GPUs let
    the whole GPU path run on CPUs. Returns the declared totals, ``{"CPU": ..., "GPU": ...}``.
    """
    ray = ray_module()
    for knob, v in (("cpus_per_job", cpus_per_job), ("gpus_per_job", gpus_per_job)):
        if float(v) < 0:
            raise ConfigError(f"live.ray.{knob} must be >= 0, got {v}")
    if ray.is_initialized():
        totals, nodes = _declared(ray)
        where, more = "the running Ray cluster", "declare more {} when starting it"
    elif not address:
        cpus = float(num_cpus) if num_cpus is not None else float(len(os.sched_getaffinity(0)))
        gpus = float(num_gpus) if num_gpus is not None else float(_local_gpus())
        totals, nodes = {"CPU": cpus, "GPU": gpus}, [{"CPU": cpus, "GPU": gpus}]
        where, more = "the local Ray cluster", "declare more with live.ray.num_{}"
    else:
        if num_cpus is not None or num_gpus is not None:
            raise ConfigError(
                f"live.ray.num_cpus / num_gpus declare a local cluster's resources; the cluster at {address} declares "
                "its own (ray start --num-cpus=N --num-gpus=N): leave them unset"
            )
        host, port = _bootstrap(str(address))
        if host:
            try:
                socket.create_connection((host, port), timeout=timeout_s).close()
            except OSError as exc:
                why = "timed out" if isinstance(exc, TimeoutError) else (exc.strerror or str(exc))
                raise ConfigError(
                    f"live.ray.address={address}: no Ray cluster answers at {host}:{port} within {timeout_s:g} s "
                    f"({why}); start one (ray start --head --port={port}) or leave live.ray.address unset for a "
                    "local cluster"
                ) from None
        try:
            _connect(ray, str(address), None, None)
        except Exception as exc:
            first = (str(exc).strip().splitlines() or [type(exc).__name__])[0]
            raise ConfigError(f"live.ray.address={address}: Ray could not join the cluster: {first}") from None
        totals, nodes = _declared(ray)
        where, more = f"the Ray cluster at {address}", "declare more with ray start --num-{}"
    for res, per, knob in (("CPU", float(cpus_per_job), "cpus_per_job"), ("GPU", float(gpus_per_job), "gpus_per_job")):
        if per <= 0:
            continue
        fits = sum(int(float(n.get(res, 0.0)) / per + 1e-9) for n in nodes)
        if fits < max_active:
            raise ConfigError(
                f"live.ray.{knob}={per:g}: up to sim.max_active={max_active} admitted jobs hold a Ray actor each (a "
                f"paused job keeps its reservation), but {where} declares {float(totals.get(res, 0.0)):g} {res}s "
                f"(room for {fits}): lower live.ray.{knob} or sim.max_active, or {more.format(res.lower() + 's')}"
            )
    return {"CPU": float(totals.get("CPU", 0.0)), "GPU": float(totals.get("GPU", 0.0))}


class RayPool:
    """One Ray actor per running job; Ray places actors on the cluster's machines and GPUs.

    Start a cluster with ``ray start --head`` on one machine and ``ray start --address=<head>:6379`` on the
    others, then run ``python -m mara.live live.workers=ray`` on the head (``live.ray.address=auto``). Without an
    address a local cluster starts, declaring ``num_cpus`` CPUs and ``num_gpus`` GPUs.

    **Checkpoints and a dead worker.** Every ``checkpoint_every`` processed batches a job's actor sends its
    serialised state (model, optimiser, data position: ``TrainingJob.to_bytes``) back with its step's result, and
    the pool keeps the latest one per job here, in the driver — so it survives the actor, its process and its
    machine. When an actor dies (crashed, ``ray.kill``-ed, machine lost) its job is reported as a ``WorkerDied``
    whose message and ``checkpoint`` say where that last checkpoint now lies: written to
    ``<checkpoint_dir>/run<k>-job<id>.ckpt`` (``k``: this process's k-th Ray pool, one per method and episode in
    the order they run; ``checkpoint_dir`` None: ``mara-live-checkpoints/<driver pid>/`` in the system's temporary
    folder). The driver then fails the job through the simulator's own failure rule, and every other job goes
    on untouched. The job is not restarted on a new actor: the simulator has already counted the lost batches
    against the job's deadline, and re-running them would make the live run differ from its replay; the
    checkpoint resumes it exactly (``TrainingJob.from_bytes``) in a run of its own. An actor that cannot start
    within ``start_timeout_s`` (no machine has the resources free) fails its job the same way instead of waiting.
    """

    name = "ray"
    _runs = 0  # Ray pools made in this process: names each pool's checkpoint files

    def __init__(
        self,
        address: str | None = None,
        cpus_per_job: float = 1.0,
        gpus_per_job: float = 0.0,
        crash: dict | None = None,
        threads: int = 1,
        *,
        num_cpus: float | None = None,
        num_gpus: float | None = None,
        checkpoint_every: int = 10,
        checkpoint_dir: str | None = None,
        start_timeout_s: float = 300.0,
    ):
        self.ray = ray_module()
        _connect(self.ray, address, num_cpus, num_gpus)
        self.cpus, self.gpus, self.crash, self.threads = cpus_per_job, gpus_per_job, crash or {}, threads
        self.every, self.start_timeout_s = int(checkpoint_every), float(start_timeout_s)
        # None: the system's temporary folder, one subfolder per driver process
        base = Path(checkpoint_dir or Path(tempfile.gettempdir()) / "mara-live-checkpoints" / str(os.getpid()))
        RayPool._runs += 1
        self.prefix = base / f"run{RayPool._runs:02d}"
        self.actor_cls = self.ray.remote(_RayJob)
        self.actors: dict[int, object] = {}
        self.checkpoints: dict[int, tuple[int, bytes]] = {}  # job -> (processed batches, state) of its latest

    def start(self, spec: JobSpec, state: bytes | None = None) -> None:
        actor = self.actor_cls.options(num_cpus=self.cpus, num_gpus=self.gpus, max_restarts=0).remote(
            spec, state, self.threads, self.crash.get(spec.job_id), self.every
        )
        try:
            self.ray.get(actor.ready.remote(), timeout=self.start_timeout_s)
        except Exception as exc:
            self.ray.kill(actor)
            why = exc.__class__.__name__
            if isinstance(exc, self.ray.exceptions.GetTimeoutError):
                why = (
                    f"no machine had {self.cpus:g} CPU(s) and {self.gpus:g} GPU(s) free within "
                    f"{self.start_timeout_s:g} s"
                )
            raise WorkerDied(f"job {spec.job_id} ({spec.family}) could not start: {why}") from None
        self.actors[spec.job_id] = actor

    def _collect(self, futures: dict) -> dict:
        out = {}
        for j, f in futures.items():
            try:
                out[j], ckpt = self.ray.get(f)
            except Exception as exc:  # RayActorError and friends: the actor (or its machine) is gone
                out[j] = self._died(j, exc)
                continue
            if ckpt is not None:
                self.checkpoints[j] = ckpt
        return out

    def _died(self, j: int, exc: Exception) -> WorkerDied:
        """The job's actor is gone, or its job raised (the actor is then stopped, its reservation freed): write the
        job's last checkpoint (if any) and say where it is."""
        actor = self.actors.pop(j, None)
        kept = self.checkpoints.pop(j, None)
        msg = f"Ray actor of job {j} died ({exc.__class__.__name__})"
        if isinstance(exc, self.ray.exceptions.RayTaskError) and actor is not None:
            self.ray.kill(actor)
            cause = exc.cause if getattr(exc, "cause", None) is not None else exc
            msg = f"job {j} raised in its Ray actor: {cause.__class__.__name__}: {str(cause).strip()[:200]}"
        if kept is None:
            return WorkerDied(f"{msg}; no checkpoint yet (one every {self.every} batches)")
        path = Path(f"{self.prefix}-job{j:03d}.ckpt")
        path.parent.mkdir(parents=True, exist_ok=True)
        part = path.with_name(path.name + ".part")
        part.write_bytes(kept[1])
        os.replace(part, path)  # whole or absent, never half written
        return WorkerDied(f"{msg}; last checkpoint: batch {kept[0]}, {path}", {"batch": kept[0], "path": str(path)})

    def run(self, job_ids) -> dict:
        return self._collect({j: self.actors[j].step.remote() for j in job_ids})

    def work(self, orders: dict) -> dict:
        return self._collect({j: self.actors[j].work.remote(order) for j, order in orders.items()})

    def export(self, job_id: int) -> bytes:
        return self.ray.get(self.actors[job_id].export.remote())

    def stop(self, job_id: int) -> None:
        self.checkpoints.pop(job_id, None)
        actor = self.actors.pop(job_id, None)
        if actor is not None:
            self.ray.kill(actor)

    def close(self) -> None:
        for j in list(self.actors):
            self.stop(j)


class _RayJob:
    """The Ray actor body: one TrainingJob on the GPU Ray assigned (if any), else CPU; every ``every`` processed
    batches a step's answer carries the job's state (``(processed, bytes)``, else None) for the driver to keep."""

    def __init__(self, spec: JobSpec, state: bytes | None, threads: int, crash_at: int | None, every: int = 0):
        import torch

        torch.set_num_threads(threads)
        device = "cuda" if torch.cuda.is_available() and os.environ.get("CUDA_VISIBLE_DEVICES") else "cpu"
        self.job = TrainingJob.from_bytes(state, device) if state else TrainingJob(spec, device)
        self.crash_at, self.device, self.every = crash_at, device, int(every)

    def ready(self) -> bool:
        return True

    def _checkpoint(self, before: int):
        due = self.every > 0 and self.job.processed // self.every > before // self.every
        return (self.job.processed, self.job.to_bytes()) if due else None

    def step(self) -> tuple:
        if self.crash_at is not None and self.job.processed + 1 >= self.crash_at:
            os._exit(17)
        before = self.job.processed
        return self.job.step(), self._checkpoint(before)

    def work(self, order: NodeStep) -> tuple:
        if self.crash_at is not None and self.job.processed + order.batches >= self.crash_at:
            os._exit(17)
        before = self.job.processed
        self.job, res = node_step(self.job, order, self.device)
        return res, self._checkpoint(before)

    def export(self) -> bytes:
        return self.job.to_bytes()
