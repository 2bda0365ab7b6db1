"""Drive the simulator's state machine with real training batches, and replay the recorded episode in the simulator.

``LiveCurveSource`` is the ``curve_source`` hook of ``BatchedEnv``: each step, after the allocator chose a
job per node, it runs each chosen job's node-step on the worker pool — one real batch on the paper's
identical nodes; s batches on a node of speed s, or a set-up step after a switch (``LiveCurveSource``) —
and writes the losses into the episode's ``LiveCurves`` (so observations, predictor inputs and success read real
losses through the simulator's own code). Arrivals, admission (FIFO, limit K), deadlines, observations every
``obs_every`` batches, predictor refreshes and success are the simulator's, unchanged.
"""

from __future__ import annotations

import time

import numpy as np

from mara.curves.bank import NEVER
from mara.eval.runner import node_options
from mara.live.episode import LiveCurves, live_episode
from mara.live.workers import NodeStep, StepResult, WorkerDied
from mara.sim.env import IDLE, BatchedEnv, TaskStatus


class LiveCurveSource:
    """Runs the chosen node-steps for real; records losses, node timeline, set-up steps, worker failures, wall time.

    How many batches a job runs in a step is read off the simulator: ``slot_s`` has already advanced by the
    node's speed (or by nothing in a set-up step) when ``advance`` is called, so the live run processes exactly
    the simulator's batches. Heterogeneous nodes: every machine here has the same hardware speed, so
    a node of speed s runs its s batches with their compute time stretched by s_max / s (a sleep): every node's
    step lasts about s_max batch times, and a speed-s node delivers s / s_max of a fast node's batches per second.
    A switch (``sim.switch_cost`` c > 0: a job served before lands on a node other than the one that served it at
    t-1) makes its worker really reload the job from its serialised state in the first set-up step; in each of the
    c set-up steps the node is busy for one step of that job (s_max of its measured batch times) without a batch.
    A job with a metric target (``targets``: job -> (mode, value)) succeeds when a validation its worker ran reaches the
    value (``max``: >=, ``min``: <=): its ``need`` is that validation's batch, and its loss never sets it.
    """

    def __init__(
        self, pool, specs, curves: LiveCurves, node_speed=None, switch_cost: int = 0, targets: dict | None = None
    ):
        self.pool, self.specs, self.curves = pool, {s.job_id: s for s in specs}, curves
        self.targets = targets or {}
        # per metric job: [step, processed batches, value]; step t + 1 as ``finish_time`` counts it (the step's end)
        self.metrics: dict[int, list] = {j: [] for j in self.targets}
        self.speed = None if node_speed is None else [int(v) for v in node_speed]
        self.s_max = 1 if self.speed is None else max(self.speed)
        self.switch_cost = int(switch_cost)
        self.started: set[int] = set()
        self.timeline: list[tuple[int, int, int]] = []  # (step, node, job): node-steps that processed batches
        self.setup_timeline: list[tuple[int, int, int]] = []  # (step, node, job): set-up node-steps (no batch)
        self.worker_failures: list[dict] = []
        self.batch_seconds = 0.0
        self.n_batches = 0
        self.reloads = 0  # runs that reloaded the job's state (switches that paid the cost)
        self.reload_seconds = 0.0  # wall seconds of the reloads (within the set-up steps)
        self.setup_seconds = 0.0  # wall seconds the nodes spent in set-up steps (reload + idle), summed over nodes
        self.stretch_seconds = 0.0  # seconds slept to stretch slower nodes' batches (sleep factor), summed over nodes
        self._sim_s: dict[int, int] = {}  # the simulator's processed batches per job at the previous step
        self._prev_node: dict[int, int] = {}  # node that served each job at t-1
        self._batch_time: dict[int, list] = {}  # per job: [compute seconds, batches] measured so far

    def _order(self, j: int, m: int, n_sim: int, n_run: int) -> NodeStep:
        """The node-step of job ``j`` on node ``m`` (class docstring): ``n_sim`` batches in the simulator, ``n_run``
        of them inside its curve's cap."""
        reload = self.switch_cost > 0 and j in self._sim_s and self._prev_node.get(j) != m
        if n_sim > 0:
            stretch = self.s_max / (1 if self.speed is None else self.speed[m])
            return NodeStep(batches=n_run, stretch=stretch, reload=reload)
        sec, n = self._batch_time.get(j, (0.0, 0))
        return NodeStep(batches=0, idle_s=self.s_max * sec / max(n, 1), reload=reload)

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
        orders, n_sim = {}, {}
        failed = {f["job"] for f in self.worker_failures}
        for j, (m, k) in node_of.items():
            s = int(env.slot_s[0, k])
            n_sim[j] = s - self._sim_s.get(j, 0)
            if j not in failed:
                n_run = max(0, min(s, int(self.curves.lengths[j])) - self.curves.recorded(j))
                orders[j] = self._order(j, m, n_sim[j], n_run)
        t0 = time.perf_counter()
        results = self.pool.work(orders) if orders else {}
        self.batch_seconds += time.perf_counter() - t0
        self._prev_node = {j: m for j, (m, _) in node_of.items()}
        for j, (m, k) in node_of.items():
            res = results.get(j)
            if isinstance(res, StepResult) and all(np.isfinite(res.losses)):
                self._sim_s[j] = int(env.slot_s[0, k])
                self.reloads += int(orders[j].reload)
                self.reload_seconds += res.reload_s
                if n_sim[j] > 0:
                    self.stretch_seconds += res.sleep_s
                else:
                    self.setup_seconds += res.reload_s + res.sleep_s
                if res.losses:
                    bt = self._batch_time.setdefault(j, [0.0, 0])
                    bt[0] += res.compute_s
                    bt[1] += len(res.losses)
                for loss in res.losses:
                    s = self.curves.recorded(j) + 1
                    L = self.curves.record(j, s, loss)
                    if j not in self.targets and L <= env.slot_eps[0, k] and env.slot_need[0, k] == NEVER:
                        env.slot_need[0, k] = s
                        env.ep.need[0, j] = s
                for s, value in res.metrics:
                    self.metrics[j].append([t + 1, int(s), float(value)])
                    if env.slot_need[0, k] == NEVER and metric_reached(value, *self.targets[j]):
                        env.slot_need[0, k] = s
                        env.ep.need[0, j] = s
                self.n_batches += len(res.losses)
                (self.timeline if n_sim[j] > 0 else self.setup_timeline).append((t, m, j))
                continue
            # the worker died (or a loss is not finite): the job fails now, nothing else is touched
            if isinstance(res, WorkerDied):  # with where its last checkpoint survives, if the pool keeps one
                kept = {"checkpoint": res.checkpoint} if res.checkpoint else {}
                self.worker_failures.append({"job": j, "step": t, "error": str(res), **kept})
            elif res is not None:
                self.worker_failures.append({"job": j, "step": t, "error": f"non-finite loss {list(res.losses)}"})
                self.pool.stop(j)
            served[0, k] = False
            env.slot_s[0, k] -= n_sim[j]
            env.slot_deadline[0, k] = t + 1  # expires in this step through the simulator's own failure rule
            env.ep.deadline[0, j] = t + 1

    def release_finished(self, env: BatchedEnv) -> None:
        """Stop the workers of jobs that left (succeeded or failed)."""
        for j in list(self.started):
            if TaskStatus.left(env.status[0, j]):
                self.pool.stop(j)
                self.started.discard(j)


def metric_reached(value: float, mode: str, target: float) -> bool:
    """A validation value reaches a metric target: ``max`` (higher is better) value >= target, ``min`` value <=
    target."""
    return value >= target if mode == "max" else value <= target


def metric_need(history, mode: str, target: float) -> int:
    """The batch of the first validation in ``history`` ([step, batch, value], ...) that reaches the target, else
    NEVER."""
    return next((int(s) for _, s, v in history if metric_reached(v, mode, target)), NEVER)


class _ProcessedBatches:
    """A read-only ``curve_source`` for the replay: the batches the simulator processed per job (no live work)."""

    def __init__(self, n: int):
        self.processed = np.zeros(n, dtype=np.int64)

    def advance(self, env: BatchedEnv, actions: np.ndarray, served: np.ndarray) -> None:
        ks = np.nonzero(served[0])[0]
        self.processed[env.slot_task[0, ks]] = np.maximum(self.processed[env.slot_task[0, ks]], env.slot_s[0, ks])


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


def _episode_env(ep, curves, sim: dict, predictor, source) -> BatchedEnv:
    """The batched simulator of one live or replayed episode: the ``sim`` block's cluster, ``source`` reading the
    curves (live batches, or the replay's counter)."""
    nodes, max_active, obs_every = int(sim["nodes"]), int(sim["max_active"]), int(sim["obs_every"])
    opts = node_options(sim)
    return BatchedEnv(ep, curves, nodes, max_active, obs_every, predictor=predictor, curve_source=source, **opts)


def run_live(tasks, specs, allocator, pool, sim: dict, predictor=None, meta: dict | None = None, progress=None) -> dict:
    """One live episode: real batches on ``pool``, the simulator's rules; returns everything the report needs."""
    curves = LiveCurves([t["cap"] for t in tasks], [t["batch_size"] for t in tasks], [t["lr"] for t in tasks])
    meta = meta or {"task_set": ["live"], "load": [0.0], "root": [0], "episode": [0]}
    ep = live_episode(tasks, specs, curves, meta, int(sim["steps"]))
    opts = node_options(sim)
    targets = {j: (t["metric"]["mode"], float(t["metric"]["value"])) for j, t in enumerate(tasks) if t.get("metric")}
    source = LiveCurveSource(pool, specs, curves, **opts, targets=targets)
    env = _episode_env(ep, curves, sim, predictor, source)

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
        "decisions": res["decisions"],
        "timeline": source.timeline,
        "worker_failures": source.worker_failures,
        "status": env.status[0, :n].tolist(),
        "finish_time": env.finish_time[0, :n].tolist(),
        "succeeded": int(m["succeeded"][0]),
        "n_tasks": n,
        "success_rate": float(m["success_rate"][0]) if n else None,
        "utilization": float(m["utilization"][0]),
        "steps": int(m["steps"][0]),
        "wall_s": wall,
        "batch_s": source.batch_seconds,
        "alloc_ms_per_step": 1000.0 * res["alloc_seconds"] / max(1, len(res["decisions"])),
        "losses": [curves.ell[j, : lengths[j]].tolist() for j in range(n)],
        "batches": lengths,
        **(
            {
                "setup_timeline": source.setup_timeline,
                "switches": int(m["switches"][0]),
                "setup_steps": int(m["setup_steps"][0]),
                "reloads": source.reloads,
                "reload_s": source.reload_seconds,
                "setup_s": source.setup_seconds,
                "stretch_s": source.stretch_seconds,
            }
            if env.hetero
            else {}
        ),
        **({"metrics": [source.metrics.get(j, []) for j in range(n)]} if targets else {}),
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


def replay(tasks, losses, allocator, sim: dict, predictor=None, meta: dict | None = None, metrics=None) -> dict:
    """The same episode in the plain simulator from the recorded losses (its only hook counts processed batches,
    read-only); decisions per step, outcome, and ``beyond_record``: batches the replay ran past what the live run
    recorded (0 when it agrees). ``metrics``: the live run's validations per job (``run_live``'s); a job with a metric
    target gets its ``need`` from them instead of from its loss."""
    curves = replay_curves(tasks, losses)
    meta = meta or {"task_set": ["live"], "load": [0.0], "root": [0], "episode": [0]}
    ep = live_episode(tasks, None, curves, meta, int(sim["steps"]))
    for j, t in enumerate(tasks):
        if t.get("metric"):
            ep.need[0, j] = metric_need(metrics[j] if metrics else [], t["metric"]["mode"], float(t["metric"]["value"]))
    n = len(tasks)
    counter = _ProcessedBatches(n)
    env = _episode_env(ep, curves, sim, predictor, counter)
    res = run_episode(env, allocator)
    m = env.metrics()
    processed = np.minimum(counter.processed, curves.lengths)  # past the cap a curve has no batches to read
    beyond = int(np.maximum(processed - np.array([len(x) for x in losses]), 0).sum())
    return {
        "decisions": res["decisions"],
        "status": env.status[0, :n].tolist(),
        "succeeded": int(m["succeeded"][0]),
        "success_rate": float(m["success_rate"][0]) if n else None,
        "beyond_record": beyond,
        "alloc_ms_per_step": 1000.0 * res["alloc_seconds"] / max(1, len(res["decisions"])),
        **({"switches": int(m["switches"][0]), "setup_steps": int(m["setup_steps"][0])} if env.hetero else {}),
    }
