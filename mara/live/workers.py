"""Where live jobs run: a pool of job-owning workers, one per running job, at most M of them busy per step.

Every pool has the same calls: ``start(spec)`` (a job joins), ``run(job_ids) -> {job_id: loss | WorkerDied}``
(one batch each, concurrently), ``work({job_id: NodeStep}) -> {job_id: StepResult | WorkerDied}`` (one node-step
each, concurrently: several batches, a sleep factor, set-up; see ``NodeStep``), ``export(job_id) -> bytes`` (its
state, to resume elsewhere) and ``stop(job_id)``. A job's model, optimiser and data position live in its worker
between steps, so preemption costs nothing unless a switch cost is modelled, and a worker that dies takes only
its own job with it.

- ``InlinePool``: every job in this process, one after another (debugging, tests).
- ``ProcessPool``: one OS process per job on this machine (``multiprocessing``; datasets loaded once in the
  parent and inherited by fork).
- ``RayPool`` (``pip install -e ".[cluster]"``): one Ray actor per job across every machine of a Ray
  cluster; each actor reserves ``cpus_per_job`` CPUs and ``gpus_per_job`` GPUs, so Ray's scheduler places
  jobs on machines and GPUs (the M "nodes" are execution slots: the allocator never runs more than M at once).
  ``check_ray_cluster`` is its check before any job starts (Ray installed, the address answers, the cluster
  declares the CPUs and GPUs the jobs reserve).
"""

from __future__ import annotations

import os
import socket
import tempfile
import time
from dataclasses import dataclass
from pathlib import Path

from mara.core.config import ConfigError
from mara.live.job import JobSpec, TrainingJob

#: how to install the optional Ray dependency (the ``cluster`` extra)
RAY_HINT = 'pip install -e ".[cluster]"'


class WorkerDied(RuntimeError):
    """A job's worker stopped answering (crashed, killed, lost machine); the job is lost, others are not.

    ``checkpoint``: where the job's last checkpoint survives, ``{"batch": processed batches, "path": file or
    None}`` (``RayPool``), or None when the pool keeps none."""

    def __init__(self, message: str, checkpoint: dict | None = None):
        super().__init__(message)
        self.checkpoint = checkpoint


@dataclass(frozen=True)
class NodeStep:
    """What a job's worker does in one step on its node (heterogeneous nodes / switch costs).

    ``reload``: first set-up step of a new run (moved or resumed with ``sim.switch_cost`` > 0): the worker
    really serialises its job and rebuilds it from the bytes (model, optimiser, data position), as a node
    loading a checkpoint would. ``batches``: real optimisation steps (the node's speed; 0 in a set-up step).
    ``stretch`` >= 1: the batches' compute time is stretched by this factor with a sleep (a node of speed s
    among nodes of top speed s_max runs at s / s_max of this machine's speed: stretch = s_max / s).
    ``idle_s``: seconds the node stays busy without a batch (a set-up step); the reload's own time counts
    against it. The default is the paper's plain step: one batch, no sleep."""

    batches: int = 1
    stretch: float = 1.0
    idle_s: float = 0.0
    reload: bool = False


@dataclass(frozen=True)
class StepResult:
    """A node-step's outcome: the batches' losses, their compute seconds, the reload and sleep seconds, and the
    validations the batches triggered ((processed batches, metric value), ...; jobs with a metric target)."""

    losses: tuple
    compute_s: float
    reload_s: float
    sleep_s: float
    metrics: tuple = ()


def node_step(job: TrainingJob, order: NodeStep, device: str = "cpu") -> tuple[TrainingJob, StepResult]:
    """Carry out ``order`` on ``job`` (in the worker that owns it) -> (the job, possibly rebuilt; the result)."""
    reload_s = 0.0
    if order.reload:
        t0 = time.perf_counter()
        job = type(job).from_bytes(job.to_bytes(), device)
        reload_s = time.perf_counter() - t0
    t0 = time.perf_counter()
    losses = tuple(job.step() for _ in range(order.batches))
    compute_s = time.perf_counter() - t0
    sleep_s = max(0.0, (order.stretch - 1.0) * compute_s) + max(0.0, order.idle_s - reload_s)
    if sleep_s > 0:
        time.sleep(sleep_s)
    return job, StepResult(losses, compute_s, reload_s, sleep_s, job.take_metrics())


def preload_datasets(specs) -> None:
    """Load each (dataset, source) the jobs need once in this process (workers forked later inherit them)."""
    from tasks_zoo.registry import load_dataset, load_zoo_config

    for s in {(s.family, s.source, s.data_root, s.cache_dir) for s in specs}:
        cfg = load_zoo_config(s[0])
        load_dataset(cfg.dataset, s[1], str(s[2]), str(s[3]), False)


class InlinePool:
    """All jobs in the calling process (no parallelism); same interface as the worker pools."""

    name = "inline"

    def __init__(self, device: str = "cpu", crash: dict | None = None):
        self.device, self.jobs, self.crash = device, {}, crash or {}

    def start(self, spec: JobSpec, state: bytes | None = None) -> None:
        self.jobs[spec.job_id] = TrainingJob.from_bytes(state, self.device) if state else TrainingJob(spec, self.device)

    def run(self, job_ids) -> dict:
        out = {}
        for j in job_ids:
            if self.crash.get(j) is not None and self.jobs[j].processed + 1 >= self.crash[j]:
                self.jobs.pop(j)
                out[j] = WorkerDied(f"job {j}: injected crash at batch {self.crash[j]}")
                continue
            out[j] = self.jobs[j].step()
        return out

    def work(self, orders: dict) -> dict:
        """One node-step per job (``NodeStep``), one job after another."""
        out = {}
        for j, order in orders.items():
            if self.crash.get(j) is not None and self.jobs[j].processed + order.batches >= self.crash[j]:
                self.jobs.pop(j)
                out[j] = WorkerDied(f"job {j}: injected crash at batch {self.crash[j]}")
                continue
            self.jobs[j], out[j] = node_step(self.jobs[j], order, self.device)
        return out

    def export(self, job_id: int) -> bytes:
        return self.jobs[job_id].to_bytes()

    def stop(self, job_id: int) -> None:
        self.jobs.pop(job_id, None)

    def close(self) -> None:
        self.jobs.clear()


# ---- one process per job ---------------------------------------------------------------------------------


def _job_process(conn, spec: JobSpec, state: bytes | None, device: str, threads: int, crash_at: int | None) -> None:
    """A job's process: build (or restore) the job, then answer step/export/stop messages until told to stop."""
    import torch

    torch.set_num_threads(threads)
    try:
        job = TrainingJob.from_bytes(state, device) if state else TrainingJob(spec, device)
    except Exception as exc:  # report, do not hang the parent
        conn.send(("err", f"{exc.__class__.__name__}: {exc}"))
        return
    conn.send(("ready", None))
    while True:
        try:
            msg = conn.recv()
        except EOFError:
            return
        if msg == "step":
            if crash_at is not None and job.processed + 1 >= crash_at:
                os._exit(17)  # fault injection (tests, `live.crash`): die like a killed worker, mid-run
            try:
                conn.send(("ok", job.step()))
            except Exception as exc:
                conn.send(("err", f"{exc.__class__.__name__}: {exc}"))
        elif isinstance(msg, NodeStep):
            if crash_at is not None and job.processed + msg.batches >= crash_at:
                os._exit(17)
            try:
                job, res = node_step(job, msg, device)
                conn.send(("ok", res))
            except Exception as exc:
                conn.send(("err", f"{exc.__class__.__name__}: {exc}"))
        elif msg == "export":
            conn.send(("ok", job.to_bytes()))
        elif msg == "stop":
            conn.close()
            return


class ProcessPool:
    """One forked OS process per running job on this machine; ``threads`` torch threads each."""

    name = "process"

    def __init__(self, device: str = "cpu", threads: int = 1, crash: dict | None = None, timeout_s: float = 600.0):
        import multiprocessing as mp

        # fork: workers inherit the parent's imported modules and preloaded datasets (CPU); CUDA needs spawn
        method = "spawn" if device.startswith("cuda") or "fork" not in mp.get_all_start_methods() else "fork"
        self.ctx = mp.get_context(method)
        self.device, self.threads, self.crash, self.timeout_s = device, threads, crash or {}, timeout_s
        self.procs: dict[int, tuple] = {}

    def start(self, spec: JobSpec, state: bytes | None = None) -> None:
        parent, child = self.ctx.Pipe()
        device = self.device
        if device == "cuda":  # several GPUs on this machine: jobs spread round-robin by id
            import torch

            device = f"cuda:{spec.job_id % max(1, torch.cuda.device_count())}"
        p = self.ctx.Process(
            target=_job_process,
            args=(child, spec, state, device, self.threads, self.crash.get(spec.job_id)),
            daemon=True,
            name=f"mara-live-job{spec.job_id}",
        )
        p.start()
        child.close()
        self.procs[spec.job_id] = (p, parent)
        tag, val = self._recv(spec.job_id)
        if tag != "ready":
            self.stop(spec.job_id)
            raise WorkerDied(f"job {spec.job_id} ({spec.family}) could not start: {val}")

    def _recv(self, job_id: int):
        p, conn = self.procs[job_id]
        deadline = time.monotonic() + self.timeout_s
        while not conn.poll(0.05):
            if not p.is_alive() or time.monotonic() > deadline:
                code = p.exitcode
                why = f"exited with code {code}" if code is not None else "timed out"
                return "died", f"worker process of job {job_id} {why}"
        try:
            return conn.recv()
        except (EOFError, OSError):
            return "died", f"worker process of job {job_id} closed its pipe (exit code {p.exitcode})"

    def run(self, job_ids) -> dict:
        return self._ask({j: "step" for j in job_ids})

    def work(self, orders: dict) -> dict:
        """One node-step per job (``NodeStep``), all concurrently (a sleeping worker uses no CPU)."""
        return self._ask(dict(orders))

    def _ask(self, msgs: dict) -> dict:
        for j, msg in msgs.items():  # all chosen jobs compute concurrently
            try:
                self.procs[j][1].send(msg)
            except (BrokenPipeError, OSError):
                pass  # reported by _recv
        out = {}
        for j in msgs:
            tag, val = self._recv(j)
            if tag == "ok":
                out[j] = val
            else:
                out[j] = WorkerDied(val)
                self._reap(j)
        return out

    def export(self, job_id: int) -> bytes:
        self.procs[job_id][1].send("export")
        tag, val = self._recv(job_id)
        if tag != "ok":
            raise WorkerDied(val)
        return val

    def _reap(self, job_id: int) -> None:
        p, conn = self.procs.pop(job_id)
        conn.close()
        p.join(timeout=5)
        if p.is_alive():
            p.kill()
            p.join(timeout=5)

    def stop(self, job_id: int) -> None:
        if job_id not in self.procs:
            return
        try:
            self.procs[job_id][1].send("stop")
        except (BrokenPipeError, OSError):
            pass
        self._reap(job_id)

    def close(self) -> None:
        for j in list(self.procs):
            self.stop(j)


# ---- Ray: one actor per job across a cluster --------------------------------------------------------------


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
