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
- ``RayPool`` (:mod:`mara.live.ray_pool`, ``pip install -e ".[cluster]"``): one Ray actor per job across every
  machine of a Ray cluster.
"""

from __future__ import annotations

import os
import time
from dataclasses import dataclass

from mara.live.job import JobSpec, TrainingJob


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
