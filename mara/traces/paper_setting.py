"""The paper's setting as a special case of the trace simulator (mara/traces/replay.py): one paper episode replayed as
trace jobs, under any paper allocator (the ``Observation -> actions [E, M]`` interface of mara/allocators/base.py).

The mapping (docs/traces.md, "One simulator"):
  * clock: one second of trace time is one simulator step, the scheduling slot is 1;
  * cluster: M GPUs (``sim.nodes``), each a node of one GPU; ``node_speed`` becomes the GPUs' speed multiples;
  * jobs: one per task, on one GPU (level 1 only, one batch per second), submitted at its arrival step, due at its
    deadline, its work the batches to the first crossing of its target loss (``EpisodeBatch.need``), so reaching the
    target is the job's end; a job whose deadline comes first leaves unfinished (``JobState.expire``);
  * the system around the allocator is ``PaperSystem``, the trace scheduler: FIFO admission to K slots (a task keeps
    its slot until it leaves), the bounded waiting queue (a turned-away arrival is DECLINED), the loss observations
    and the predictor's estimates, the switch-cost set-up steps (charged as the simulator's set-up overhead, one step
    at a time), and the allocator's choice of a slot per node turned into one GPU per served job.
A decision happens at every step while a task is present (the scheduler asks to re-plan one step later), so the
allocator sees what ``BatchedEnv`` shows it; steps with nothing present are skipped (the rules are stateless there).

Arrays: ``[N]`` over the episode's tasks (arrival order, as ``EpisodeBatch``), ``[K]`` over slots, ``[M]`` nodes.
"""

from __future__ import annotations

import numpy as np

from mara.predictors.estimates import predict_band
from mara.predictors.protocol import WARMUP_OBS, check_first_obs
from mara.sched.interface import Decision
from mara.sim.env import IDLE, Observation, TaskStatus
from mara.sim.estimates import loss_history
from mara.sim.metrics import episode_metrics
from mara.sim.nodes import charge_switches
from mara.sim.workload import EpisodeBatch
from mara.traces.replay import DECLINED, DONE, EXPIRED, PENDING, RUNNING, JobState, replay


def episode_jobs(ep: EpisodeBatch, e: int, n_nodes: int, node_speed=None) -> JobState:
    """Episode ``e`` of ``ep`` as trace jobs on ``n_nodes`` one-GPU nodes, one step per second ``[N]``."""
    n = int(ep.n_tasks[e])
    tput = np.ones((n, 1))  # one batch per second on one GPU (times the GPU's speed multiple)
    speed = None if node_speed is None else np.asarray(node_speed, dtype=np.float64)
    return JobState(
        ep.arrival[e, :n].astype(np.int64),
        ep.deadline[e, :n].astype(np.int64),
        tput,
        np.zeros(n, dtype=np.int64),
        ep.need[e, :n].astype(np.float64),
        n_nodes,
        slot=1,
        expire=True,
        gpu_speed=speed,
    )


class PaperSystem:
    """The paper's admission, observations and set-up rules around an allocator, as a trace scheduler of one episode.

    ``alloc``: a paper allocator (``reset(E)``, ``act(Observation) -> [1, M]``); ``predictor``: None, a privileged
    one (the truth bound) or any remaining-batches predictor."""

    name = "paper"
    caps = "table"

    def __init__(
        self,
        alloc,
        ep: EpisodeBatch,
        e: int,
        bank,
        n_nodes: int,
        max_active: int,
        obs_every: int,
        predictor=None,
        queue_capacity: int | None = None,
        node_speed=None,
        switch_cost: int = 0,
    ):
        self.alloc, self.ep, self.e, self.bank, self.predictor = alloc, ep, e, bank, predictor
        self.M, self.K, self.every, self.Q = n_nodes, max_active, obs_every, queue_capacity
        self.node_speed = None if node_speed is None else np.asarray(node_speed, dtype=np.int64)
        self.switch_cost = int(switch_cost)
        self.hetero = self.node_speed is not None or self.switch_cost > 0
        self.first_obs = (
            WARMUP_OBS if predictor is None else check_first_obs(getattr(predictor, "first_obs", WARMUP_OBS))
        )
        self.privileged = bool(getattr(predictor, "privileged", False))

    def start(self, state: JobState) -> None:
        s, K, N = state, self.K, len(state.submit)
        self.s = s
        self.work0 = s.iter_left.copy()  # batches to the target (the job's work)
        self.done_prev = np.zeros(N)  # processed batches at the previous decision
        self.queued = np.zeros(N, dtype=bool)
        self.admitted = np.zeros(N, dtype=bool)  # held a slot (a task that expires there has a finish step)
        self.slot_task = np.full(K, IDLE, dtype=np.int64)
        self.pred, self.pred_lo, self.pred_hi = np.zeros(K), np.zeros(K), np.zeros(K)
        self.pred_s = np.zeros(K, dtype=np.int64)
        self.last_node = np.full(K, IDLE, dtype=np.int64)
        self.started = np.zeros(K, dtype=bool)
        self.setup = np.zeros(K, dtype=np.int64)
        self.ready_time = np.full(N, -1, dtype=np.int64)
        self.busy = self.full_steps = self.queue_sum = self.switches = self.setup_steps = 0
        self.alloc.reset(1)

    # ------------------------------------------------------------------ one decision = one paper step
    def decide(self, now: int, arrivals: np.ndarray) -> Decision:
        s, ep, e = self.s, self.ep, self.e
        done = self.work0 - s.iter_left  # processed batches [N]
        self._observe(now, done)
        self.done_prev = done
        left = (self.slot_task >= 0) & np.isin(s.status[np.maximum(self.slot_task, 0)], (DONE, EXPIRED))
        self.slot_task[left] = IDLE
        self.queued &= s.status == PENDING  # expired in the queue
        self.queued[arrivals] = True
        away = self._admit()
        active = self.slot_task >= 0
        if not active.any():
            return Decision(admit=arrivals, decline=away)
        n_queued = int(self.queued.sum())
        self.full_steps += int(active.sum() >= self.K)
        self.queue_sum += n_queued
        tk = np.maximum(self.slot_task, 0)
        sd = np.where(active, done[tk], 0).astype(np.int64)
        extra = {}
        if self.hetero:
            extra = dict(
                node_speed=None if self.node_speed is None else self.node_speed.copy(),
                switch_cost=self.switch_cost,
                last_node=self.last_node.copy()[None],
                started=self.started.copy()[None],
                setup_left=self.setup.copy()[None],
            )
        obs = Observation(
            now,
            self.slot_task.copy()[None],
            sd[None],
            ep.arrival[e, tk][None],
            ep.deadline[e, tk][None],
            ep.cap[e, tk][None],
            self.pred.copy()[None],
            self.pred_s.copy()[None],
            np.array([n_queued]),
            np.array([False]),
            self.M,
            self.K,
            self.every,
            slot_pred_lo=self.pred_lo.copy()[None],
            slot_pred_hi=self.pred_hi.copy()[None],
            first_obs=self.first_obs,
            **extra,
        )
        d = self._serve(now, np.asarray(self.alloc.act(obs), dtype=np.int64)[0], sd)
        d.admit, d.decline, d.replan_at = arrivals, away, now + 1
        return d

    def _observe(self, now: int, done: np.ndarray) -> None:
        """Loss observations made since the previous decision: the warm-up's end (``ready_time``) and the predictor's
        new estimates for the tasks still present."""
        k = np.flatnonzero(self.slot_task >= 0)
        if k.size == 0:
            return
        j = self.slot_task[k]
        cap = self.ep.cap[self.e, j]
        s_old, s_new = self.done_prev[j].astype(np.int64), done[j].astype(np.int64)
        new_obs = np.minimum(s_new, cap) // self.every > s_old // self.every
        w = WARMUP_OBS * self.every
        self.ready_time[j[new_obs & (s_old < w) & (s_new >= w)]] = now
        if self.predictor is None:
            return
        live = np.isin(self.s.status[j], (PENDING, RUNNING))
        warm = new_obs & live & (s_new >= self.first_obs * self.every)
        if warm.any():
            self._refresh(k[warm], j[warm], s_new[warm], cap[warm])

    def _refresh(self, ks, tk, s, cap) -> None:
        """The predictor's estimate of the remaining batches of slots ``ks`` (tasks ``tk``, ``s`` batches done)."""
        ep, e, cap_rem = self.ep, self.e, np.maximum(cap - s, 0)
        if self.privileged:  # the truth bound reads the true crossing
            est = self.predictor.remaining_from_need(ep.need[e, tk], s, cap_rem)
            lo = hi = est
        else:
            n = s // self.every
            bs = ep.batch_size[e, tk]
            S, L = loss_history(self.bank.L, ep.curve_row[e, tk], n, cap, bs, self.every)
            lo, est, hi = predict_band(
                self.predictor,
                S,
                L,
                n,
                ep.eps[e, tk],
                cap_rem,
                bs,
                ep.lr[e, tk],
                family=ep.family[e, tk],
                keys=None,
                cache=None,
            )
        self.pred[ks], self.pred_lo[ks], self.pred_hi[ks], self.pred_s[ks] = est, lo, hi, s

    def _admit(self) -> np.ndarray:
        """FIFO admission: queue head (arrival order) to the lowest free slots; arrivals beyond ``Q`` waiting leave
        (returned: the jobs turned away)."""
        free = np.flatnonzero(self.slot_task < 0)
        head = np.flatnonzero(self.queued)[: free.size]
        use = free[: head.size]
        self.slot_task[use] = head
        self.queued[head] = False
        self.admitted[head] = True
        self.pred[use] = self.pred_lo[use] = self.pred_hi[use] = 0.0
        self.pred_s[use] = 0
        self.last_node[use], self.started[use], self.setup[use] = IDLE, False, 0
        if self.Q is not None:
            q = np.flatnonzero(self.queued)
            if q.size > self.Q:
                away = q[self.Q :]  # the latest arrivals
                self.queued[away] = False
                return away
        return np.empty(0, dtype=np.int64)

    def _serve(self, now: int, actions: np.ndarray, sd: np.ndarray) -> Decision:
        """One GPU to the job of each node's slot; switch-cost set-up as overhead; planned finish and end event."""
        K = self.K
        node = np.full(K + 1, IDLE, dtype=np.int64)
        node[actions] = np.arange(self.M)  # IDLE lands in the last entry
        node = node[:K]
        served = node >= 0
        if np.any(served & (self.slot_task < 0)):
            raise ValueError("a node was assigned to an empty slot")
        self.busy += int(served.sum())
        setup_now = np.zeros(K, dtype=bool)
        if self.switch_cost > 0:
            switch, setup_now = charge_switches(
                served, self.started, node, self.last_node, self.setup, self.switch_cost
            )
            self.switches += int(switch.sum())
            owed = np.where(setup_now, self.setup + 1, 0)  # set-up steps still to pay, this one included
            self.setup_steps += int(setup_now.sum())
        else:
            owed = np.zeros(K, dtype=np.int64)
        self.started |= served
        self.last_node = np.where(served, node, IDLE)
        active = np.flatnonzero(self.slot_task >= 0)
        j = self.slot_task[active]
        on = served[active]
        speed = np.ones(self.M, dtype=np.int64) if self.node_speed is None else self.node_speed
        sp = speed[np.maximum(node[active], 0)]
        left = np.maximum(self.work0[j] - sd[active], 0).astype(np.int64)
        fin = (now + owed[active] + -(-left // sp)).astype(np.float64)
        return Decision(
            j,
            on.astype(np.int64),
            np.where(on, fin, np.nan),  # a job without a GPU keeps its planned finish
            np.where(on, fin, np.inf),
            np.where(setup_now[active], 1.0, 0.0),
            np.where(on, node[active], -1),
        )

    # ------------------------------------------------------------------ outcomes
    def outcomes(self, n_steps: int) -> tuple[np.ndarray, np.ndarray, dict]:
        """(status [N] as ``TaskStatus``, finish step [N] (-1: none), the episode's ``BatchedEnv.metrics()`` values)."""
        s = self.s
        N = len(s.submit)
        status = np.full(N, int(TaskStatus.PENDING), dtype=np.int8)
        status[s.status == DONE] = TaskStatus.SUCCEEDED
        status[s.status == EXPIRED] = TaskStatus.FAILED
        status[s.status == DECLINED] = TaskStatus.TURNED_AWAY
        finish = np.full(N, -1, dtype=np.int64)
        done = s.status == DONE
        finish[done] = s.finish[done].astype(np.int64)
        active_left = (s.status == EXPIRED) & self.admitted  # expired in a slot (not in the queue): a finish step
        finish[active_left] = s.ended[active_left].astype(np.int64)
        leave = np.where(s.status == DECLINED, s.submit, np.where(np.isnan(s.ended), 0, s.ended))
        steps = max(int(n_steps), int(leave.max(initial=0)))
        return (
            status,
            finish,
            {
                "steps": steps,
                "busy": self.busy,
                "full_steps": self.full_steps,
                "queue_sum": self.queue_sum,
                "switches": self.switches,
                "setup_steps": self.setup_steps,
                "ready_time": self.ready_time,
            },
        )


def replay_episodes(
    alloc,
    ep: EpisodeBatch,
    bank,
    n_nodes: int = 7,
    max_active: int = 10,
    obs_every: int = 10,
    predictor=None,
    queue_capacity: int | None = None,
    node_speed=None,
    switch_cost: int = 0,
    progress=None,
):
    """Every episode of ``ep`` replayed on the trace simulator under ``alloc`` -> (status [E, N], finish step [E, N],
    metrics: ``BatchedEnv.metrics()``'s keys, arrays [E]). ``progress(done, total)`` after each episode."""
    E, N = ep.E, ep.N
    status = np.full((E, N), int(TaskStatus.PENDING), dtype=np.int8)
    finish = np.full((E, N), -1, dtype=np.int64)
    ready = np.full((E, N), -1, dtype=np.int64)
    keys = ("steps", "busy", "full_steps", "queue_sum", "switches", "setup_steps")
    acc = {k: np.zeros(E, dtype=np.int64) for k in keys}
    speed = None if node_speed is None else np.asarray(node_speed, dtype=np.int64)
    for e in range(E):
        n = int(ep.n_tasks[e])
        if n:
            state = episode_jobs(ep, e, n_nodes, speed)
            system = PaperSystem(
                alloc, ep, e, bank, n_nodes, max_active, obs_every, predictor, queue_capacity, speed, switch_cost
            )
            replay(state, system, np.zeros(n, dtype=np.int64), 1)
            st, fin, m = system.outcomes(ep.n_steps)
            status[e, :n], finish[e, :n], ready[e, :n] = st, fin, m["ready_time"]
            for k in keys:
                acc[k][e] = m[k]
        else:
            acc["steps"][e] = ep.n_steps
        if progress is not None:
            progress(e + 1, E)
    return status, finish, episode_metrics(ep, status, ready, acc, n_nodes, speed, switch_cost)
