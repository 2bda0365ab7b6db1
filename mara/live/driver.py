"""Drive the simulator's state machine with real training batches, and replay the recorded episode in the simulator.

``LiveCurveSource`` is the ``curve_source`` hook of ``BatchedEnv``: each step, after the allocator chose a
job per node, it runs one real batch of each chosen job on the worker pool and writes the loss into the
episode's ``LiveCurves`` (so observations, predictor inputs and success read real losses through the
simulator's own code). Arrivals, admission (FIFO, limit K), deadlines, observations every ``obs_every``
batches, predictor refreshes and success are the simulator's, unchanged.
"""
from __future__ import annotations

import time

import numpy as np

from mara.curves.bank import NEVER
from mara.live.episode import LiveCurves, live_episode
from mara.live.workers import WorkerDied
from mara.sim.env import IDLE, BatchedEnv


class LiveCurveSource:
    """Runs the chosen batches for real; records losses, node timeline, worker failures and batch wall time."""

    def __init__(self, pool, specs, curves: LiveCurves):
        self.pool, self.specs, self.curves = pool, {s.job_id: s for s in specs}, curves
        self.started: set[int] = set()
        self.timeline: list[tuple[int, int, int]] = []  # (step, node, job)
        self.worker_failures: list[dict] = []
        self.batch_seconds = 0.0

    def advance(self, env: BatchedEnv, actions: np.ndarray, served: np.ndarray) -> None:
        t = env.t
        node_of = {}
        for m, k in enumerate(np.asarray(actions)[0]):
            if k != IDLE:
                node_of[int(env.slot_row[0, k])] = (m, int(k))
        for j in node_of:
            if j not in self.started:
                self.started.add(j)
                try:
                    self.pool.start(self.specs[j])
                except WorkerDied as exc:
                    self.worker_failures.append({"job": j, "step": t, "error": str(exc)})
        run = [j for j in node_of if not any(f["job"] == j for f in self.worker_failures)]
        t0 = time.perf_counter()
        losses = self.pool.run(run) if run else {}
        self.batch_seconds += time.perf_counter() - t0
        for j, (m, k) in node_of.items():
            loss = losses.get(j)
            if isinstance(loss, float) and np.isfinite(loss):
                s = int(env.slot_s[0, k])
                L = self.curves.record(j, s, loss)
                if L <= env.slot_eps[0, k] and env.slot_need[0, k] == NEVER:
                    env.slot_need[0, k] = s
                    env.ep.need[0, j] = s
                self.timeline.append((t, m, j))
                continue
            # the worker died (or the loss is not finite): the job fails now, nothing else is touched
            if isinstance(loss, WorkerDied):
                self.worker_failures.append({"job": j, "step": t, "error": str(loss)})
            elif loss is not None:
                self.worker_failures.append({"job": j, "step": t, "error": f"non-finite loss {loss}"})
                self.pool.stop(j)
            served[0, k] = False
            env.slot_s[0, k] -= 1
            env.slot_deadline[0, k] = t + 1  # expires in this step through the simulator's own failure rule
            env.ep.deadline[0, j] = t + 1

    def release_finished(self, env: BatchedEnv) -> None:
        """Stop the workers of jobs that left (succeeded or failed)."""
        for j in list(self.started):
            if env.status[0, j] >= 3:
                self.pool.stop(j)
                self.started.discard(j)


def run_episode(env: BatchedEnv, allocator, on_step=None) -> dict:
    """Step one episode (E = 1) to the end; returns decisions per step (job per node, -1 idle) and timings."""
    obs = env.reset()
    allocator.reset(1)
    decisions, alloc_s = [], 0.0
    limit = env.ep.horizon + env.ep.n_steps + 2
    for _ in range(limit):
        if env.done.all():
            break
        t0 = time.perf_counter()
        actions = np.asarray(allocator.act(obs))
        alloc_s += time.perf_counter() - t0
        decisions.append([int(env.slot_task[0, k]) if k != IDLE else -1 for k in actions[0]])
        obs, _, _, _ = env.step(actions)
        if on_step is not None:
            on_step(env)
    else:
        if not env.done.all():
            raise RuntimeError(f"episode did not finish within {limit} steps")
    return {"decisions": decisions, "alloc_seconds": alloc_s}


def run_live(tasks, specs, allocator, pool, sim: dict, predictor=None, meta: dict | None = None, progress=None) -> dict:
    """One live episode: real batches on ``pool``, the simulator's rules; returns everything the report needs."""
    curves = LiveCurves([t["cap"] for t in tasks], [t["batch_size"] for t in tasks], [t["lr"] for t in tasks])
    meta = meta or {"task_set": ["live"], "load": [0.0], "root": [0], "episode": [0]}
    ep = live_episode(tasks, specs, curves, meta, int(sim["steps"]))
    source = LiveCurveSource(pool, specs, curves)
    env = BatchedEnv(ep, curves, int(sim["nodes"]), int(sim["max_active"]), int(sim["obs_every"]), predictor=predictor,
                     curve_source=source)

    def on_step(env):
        source.release_finished(env)
        if progress is not None:
            progress(env, source)

    t0 = time.perf_counter()
    try:
        res = run_episode(env, allocator, on_step)
    finally:
        pool.close()
    wall = time.perf_counter() - t0
    m = env.metrics()
    n = len(tasks)
    lengths = [int(np.sum(np.isfinite(curves.ell[j]))) for j in range(n)]
    return {
        "decisions": res["decisions"], "timeline": source.timeline, "worker_failures": source.worker_failures,
        "status": env.status[0, :n].tolist(), "finish_time": env.finish_time[0, :n].tolist(),
        "succeeded": int(m["succeeded"][0]), "n_tasks": n, "success_rate": float(m["success_rate"][0]) if n else None,
        "utilization": float(m["utilization"][0]), "steps": int(m["steps"][0]), "wall_s": wall,
        "batch_s": source.batch_seconds, "alloc_ms_per_step": 1000.0 * res["alloc_seconds"] / max(1, len(res["decisions"])),
        "losses": [curves.ell[j, : lengths[j]].tolist() for j in range(n)], "batches": lengths,
    }


def replay_curves(tasks, losses) -> LiveCurves:
    """Curves for replaying an episode from recorded per-batch losses (one list per job, possibly empty).

    Past a job's record (only reached if the replay diverges from the live run) its last loss is held;
    a job that never ran gets a loss of 1e3 (never reaches ε). ``replay`` counts such batches.
    """
    caps = [t["cap"] for t in tasks]
    ell = np.full((len(tasks), max(caps)), np.nan)
    for j, (cap, ls) in enumerate(zip(caps, losses)):
        ls = np.asarray(ls, dtype=np.float64)[:cap]
        ell[j, : len(ls)] = ls
        ell[j, len(ls) : cap] = ls[-1] if len(ls) else 1e3
    return LiveCurves(caps, [t["batch_size"] for t in tasks], [t["lr"] for t in tasks], ell)


def replay(tasks, losses, allocator, sim: dict, predictor=None, meta: dict | None = None) -> dict:
    """The same episode in the plain simulator (no live hook) from the recorded losses; decisions per step,
    outcome, and ``beyond_record``: batches the replay ran past what the live run recorded (0 when it agrees)."""
    curves = replay_curves(tasks, losses)
    meta = meta or {"task_set": ["live"], "load": [0.0], "root": [0], "episode": [0]}
    ep = live_episode(tasks, None, curves, meta, int(sim["steps"]))
    env = BatchedEnv(ep, curves, int(sim["nodes"]), int(sim["max_active"]), int(sim["obs_every"]), predictor=predictor)
    res = run_episode(env, allocator)
    m = env.metrics()
    n = len(tasks)
    served = np.bincount([j for row in res["decisions"] for j in row if j >= 0], minlength=n)
    beyond = int(np.maximum(served - np.array([len(x) for x in losses]), 0).sum())
    return {"decisions": res["decisions"], "status": env.status[0, :n].tolist(), "succeeded": int(m["succeeded"][0]),
            "success_rate": float(m["success_rate"][0]) if n else None, "beyond_record": beyond,
            "alloc_ms_per_step": 1000.0 * res["alloc_seconds"] / max(1, len(res["decisions"]))}
