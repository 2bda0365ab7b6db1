"""The batched simulator: E episodes stepped at once (docs/architecture.md).

Shapes: ``[E, K]`` episodes × active slots, ``[E, N]`` episodes × tasks, ``[E, M]`` episodes × nodes.

One step ``t``:
  1. arrivals with ``arrival == t`` join the FIFO admission queue; the queue head is admitted while
     fewer than K tasks are active (a task keeps its slot until it leaves); with a bounded waiting
     queue (``queue_capacity`` Q) the arrivals that still find Q tasks waiting are turned away: they
     never enter the system and are not counted in ``n_tasks`` (``turned_away`` counts them);
  2. the allocator sees the observation and returns, per node, a slot index or ``IDLE`` (-1);
  3. each chosen task executes one batch; a task succeeds the moment its processed batches reach the
     first crossing of ε (``need``) — its executable steps are ``arrival <= t < deadline``;
  4. tasks (active or queued) with ``deadline <= t + 1`` that have not succeeded fail and leave;
  5. ``t += 1``.
Heterogeneous nodes and switch costs (both off by default, and then every node processes one batch of the
task it serves per step, the rule above):
  * ``node_speed`` (list of M positive integers, default all 1): node i processes ``node_speed[i]``
    batches of the task it serves per step (all of them within the step; success is checked at its
    end, so a task one batch short on a speed-2 node still takes the whole step). Speeds are integers:
    a fractional speed would need a carried-over partial batch and observations between steps, so it
    is refused. A speed may not exceed ``obs_every`` (at most one loss observation per step).
  * ``switch_cost`` c (int >= 0, default 0): a task that has been served before (at any earlier
    step) and is served at step t on a node other than the one that served it at t−1 — moved, or
    resumed after a pause — starts a new *run*; the first c steps of a run on that node are set-up and
    process no batch (the node is busy, the deadline keeps running). Moving or pausing a task during
    its set-up starts the set-up again. The very first start of a task is free (nothing to reload);
    a task kept on its node keeps working. Observations expose ``node_speed``, ``switch_cost``,
    ``last_node`` (node per slot at t−1, −1 if unserved), ``started`` (served before) and
    ``setup_left`` (set-up steps still owed if it stays on ``last_node``).
An episode is done once ``t >= T`` and nothing is active or queued. Observations (loss points) are
produced every ``obs_every`` processed batches; a predictor re-estimates a task's remaining batches
only when it gets a new observation (from the 4th on), and the estimate then counts down with service.
A predictor that answers cold tasks too says so with its ``first_obs`` (1–4, default 4): its estimates are then
asked for, and shown in ``Observation.pred_remaining``, from that observation on; before it the estimate is the cap.
A cold task it has no estimate for (NaN: a family without training curves) keeps the cap and
``Observation.no_estimate``."""

from __future__ import annotations

from enum import IntEnum
from functools import cached_property

import numpy as np

from mara.curves.bank import NEVER, CurveBank
from mara.predictors.estimates import predict_band
from mara.predictors.protocol import WARMUP_OBS, check_first_obs
from mara.sim.workload import EpisodeBatch

IDLE = -1


class TaskStatus(IntEnum):
    """Where a task is in its life (``BatchedEnv.status`` [E, N], int8); the values are the stored integers."""

    PENDING = 0  # not yet arrived
    QUEUED = 1  # in the FIFO admission queue
    ACTIVE = 2  # holds one of the K slots
    SUCCEEDED = 3
    FAILED = 4  # deadline reached, in a slot or in the queue
    TURNED_AWAY = 5  # found the bounded waiting queue full: never entered, not counted in n_tasks

    @classmethod
    def left(cls, status):
        """Mask of tasks that have left the system (succeeded, failed or turned away); ``status`` any shape."""
        return status >= cls.SUCCEEDED


# the hot comparisons use an int8 scalar: numpy compares an int8 array with an IntEnum member several times slower
_QUEUED = np.int8(TaskStatus.QUEUED)


class Observation:
    """What allocators see at step t: per episode and slot arrays ``[E, K]`` (absent slots are 0/False).

    Built from a snapshot of the simulator state; derived fields are computed on first access, so an
    allocator pays only for what it reads.
    """

    first_obs = WARMUP_OBS  # observations from which the estimates are shown (the predictor's ``first_obs``)

    def __init__(
        self,
        t,
        slot_task,
        slot_s,
        slot_arrival,
        slot_deadline,
        slot_cap,
        slot_pred,
        slot_pred_s,
        n_queued,
        done,
        n_nodes,
        max_active,
        obs_every,
        slot_pred_lo=None,
        slot_pred_hi=None,
        node_speed=None,
        switch_cost=0,
        last_node=None,
        started=None,
        setup_left=None,
        first_obs=WARMUP_OBS,
    ):
        self.t = t
        self.task = slot_task  # [E, K] int task index (arrival order), -1 if empty
        self.present = slot_task >= 0  # [E, K] bool
        self._s, self._arr, self._dl, self._cap = slot_s, slot_arrival, slot_deadline, slot_cap
        self._pred, self._pred_s, self._every = slot_pred, slot_pred_s, obs_every
        self.obs_every = obs_every  # batches per loss observation
        self._pred_lo = slot_pred if slot_pred_lo is None else slot_pred_lo  # no band given: degenerate band
        self._pred_hi = slot_pred if slot_pred_hi is None else slot_pred_hi
        self.n_queued = n_queued  # [E] int
        self.done = done  # [E] bool
        self.n_nodes = n_nodes
        self.max_active = max_active
        # heterogeneous nodes / switch costs (module docstring); ``hetero`` False = the paper's identical nodes
        self.hetero = node_speed is not None or switch_cost > 0
        self._node_speed = node_speed
        self.switch_cost = switch_cost
        self._last_node, self._started, self._setup_left = last_node, started, setup_left
        if first_obs != WARMUP_OBS:  # the class default otherwise (states saved without it rebuild unchanged)
            self.first_obs = first_obs

    @cached_property
    def node_speed(self) -> np.ndarray:  # [M] int batches per step of each node
        return np.ones(self.n_nodes, dtype=np.int64) if self._node_speed is None else self._node_speed

    @cached_property
    def last_node(self) -> np.ndarray:  # [E, K] int node that served the slot at t-1, -1 if none
        return (
            self._mask(self._last_node, -1) if self._last_node is not None else np.full(self.task.shape, -1, np.int64)
        )

    @cached_property
    def started(self) -> np.ndarray:  # [E, K] bool served at some earlier step (a move or resume pays the switch cost)
        return self._mask(self._started, False) if self._started is not None else self.processed > 0

    @cached_property
    def setup_left(self) -> np.ndarray:  # [E, K] int set-up steps still owed if served again on last_node
        return self._mask(self._setup_left) if self._setup_left is not None else np.zeros(self.task.shape, np.int64)

    def _mask(self, a, fill=0):
        return np.where(self.present, a, fill)

    @cached_property
    def n_active(self) -> np.ndarray:  # [E]
        return self.present.sum(axis=1)

    @cached_property
    def arrival(self) -> np.ndarray:  # [E, K] int
        return self._mask(self._arr)

    @cached_property
    def deadline(self) -> np.ndarray:  # [E, K] int
        return self._mask(self._dl)

    @cached_property
    def remaining_time(self) -> np.ndarray:  # [E, K] int steps still executable (deadline - t)
        return self._mask(self._dl - self.t)

    @cached_property
    def processed(self) -> np.ndarray:  # [E, K] int batches processed so far
        return self._mask(self._s)

    @cached_property
    def n_obs(self) -> np.ndarray:  # [E, K] int loss observations so far
        return self._mask(np.minimum(self._s, self._cap) // self._every)

    @cached_property
    def cap_remaining(self) -> np.ndarray:  # [E, K] int batches left to the generation cap
        return self._mask(np.maximum(self._cap - self._s, 0))

    @cached_property
    def no_estimate(self) -> np.ndarray:  # [E, K] bool asked for a cold estimate (n_obs < 4) and none known (NaN)
        if self.first_obs >= WARMUP_OBS:
            return np.zeros(self.task.shape, dtype=bool)
        return self.present & (self.n_obs >= self.first_obs) & (self.n_obs < WARMUP_OBS) & np.isnan(self._pred)

    @cached_property
    def pred_remaining(self) -> np.ndarray:  # [E, K] float predicted remaining batches (cap_remaining while cold)
        warm = (self.n_obs >= self.first_obs) & ~self.no_estimate
        est = np.clip(self._pred - (self._s - self._pred_s), 0, None)
        return np.where(warm, est, self.cap_remaining).astype(np.float64)

    def _aged(self, pred) -> np.ndarray:
        warm = (self.n_obs >= self.first_obs) & ~self.no_estimate
        return np.where(warm, np.clip(pred - (self._s - self._pred_s), 0, None), self.cap_remaining).astype(np.float64)

    @cached_property
    def pred_remaining_lo(
        self,
    ) -> np.ndarray:  # [E, K] lower end (q10) of the predictor's band, aged like pred_remaining
        return self._aged(self._pred_lo)

    @cached_property
    def pred_remaining_hi(self) -> np.ndarray:  # [E, K] upper end (q90) of the predictor's band
        return self._aged(self._pred_hi)

    @cached_property
    def warmup(self) -> np.ndarray:  # [E, K] float fraction of the 4-observation warm-up done
        return np.minimum(self.n_obs, WARMUP_OBS) / WARMUP_OBS


def _is_whole(v) -> bool:
    """A finite whole number (not a bool, a string, NaN or infinity)."""
    if isinstance(v, bool) or not isinstance(v, (int, float, np.integer, np.floating)):
        return False
    return bool(np.isfinite(v)) and int(v) == v


def check_node_options(node_speed, switch_cost, n_nodes: int, obs_every: int):
    """Validated ``(node_speed [M] int64 or None, switch_cost int)``; None = every node at speed 1.

    One-line ``ValueError`` for a wrong length, a non-integer or non-positive speed, a speed above
    ``obs_every``, or a negative / non-integer switch cost. All-ones speeds normalise to None."""
    if not _is_whole(switch_cost):
        raise ValueError(f"sim.switch_cost must be an integer >= 0, got {switch_cost!r}")
    if switch_cost < 0:
        raise ValueError(f"sim.switch_cost must be >= 0 (steps lost per move or resume), got {switch_cost}")
    if node_speed is None:
        return None, int(switch_cost)
    if isinstance(node_speed, (str, int, float)):
        raise ValueError(f"sim.node_speed must be null or a list of {n_nodes} positive integers, got {node_speed!r}")
    sp = list(node_speed)
    if len(sp) != n_nodes:
        raise ValueError(f"sim.node_speed must have one entry per node (sim.nodes = {n_nodes}), got {len(sp)}")
    for v in sp:
        if not _is_whole(v):
            raise ValueError(
                "sim.node_speed entries must be integers (batches per step; fractional speeds are not "
                f"supported), got {v!r}"
            )
        if v < 1:
            raise ValueError(f"sim.node_speed entries must be >= 1, got {v}")
        if v > obs_every:
            raise ValueError(
                f"sim.node_speed entries must be <= sim.obs_every = {obs_every} (one observation per step), got {v}"
            )
    arr = np.asarray(sp, dtype=np.int64)
    return (None if np.all(arr == 1) else arr), int(switch_cost)


def isolated_feasible(need, budget, node_speed=None) -> np.ndarray:
    """Can each task succeed alone? It runs without a break on the fastest node (its first start is free),
    so it needs ``ceil(need / max speed)`` steps of its budget."""
    smax = 1 if node_speed is None else int(np.max(node_speed))
    need = np.asarray(need, dtype=np.int64)
    return -(-need // smax) <= np.asarray(budget)


class BatchedEnv:
    """Steps every episode of an ``EpisodeBatch`` in lockstep; see the module docstring for the rules."""

    def __init__(
        self,
        episodes: EpisodeBatch,
        bank: CurveBank,
        n_nodes: int = 7,
        max_active: int = 10,
        obs_every: int = 10,
        predictor=None,
        beta: float = 0.1,
        compute_reward: bool = False,
        curve_source=None,
        queue_capacity: int | None = None,
        fm_cache=None,
        node_speed=None,
        switch_cost: int = 0,
    ) -> None:
        if n_nodes < 1:
            raise ValueError(f"sim.nodes must be >= 1, got {n_nodes}")
        if max_active < 1:
            raise ValueError(f"sim.max_active must be >= 1, got {max_active}")
        if obs_every < 1:
            raise ValueError(f"sim.obs_every must be >= 1, got {obs_every}")
        if queue_capacity is not None and queue_capacity < 0:
            raise ValueError(f"sim.queue_capacity must be >= 0 or null (unbounded), got {queue_capacity}")
        if curve_source is not None and getattr(predictor, "privileged", False):
            raise ValueError(f"predictor {predictor.name!r} reads the recorded crossing and cannot run in live mode")
        self.queue_capacity = queue_capacity
        self.node_speed, self.switch_cost = check_node_options(node_speed, switch_cost, n_nodes, obs_every)
        # node bookkeeping (who served whom, set-up owed) only where speeds or switch costs make it matter
        self.hetero = self.node_speed is not None or self.switch_cost > 0
        self.ep, self.bank = episodes, bank
        self.M, self.K, self.obs_every = n_nodes, max_active, obs_every
        self.predictor, self.beta, self.compute_reward = predictor, beta, compute_reward
        # the observation from which the predictor is asked for estimates (4 unless it answers cold tasks too)
        self.first_obs = (
            WARMUP_OBS if predictor is None else check_first_obs(getattr(predictor, "first_obs", WARMUP_OBS))
        )
        # live mode (mara.live): ``curve_source.advance(env, actions, served)`` runs the chosen batches for real
        # and writes their losses into ``bank.L`` (and ``slot_need`` on a crossing) before the step reads them;
        # None = replay the recorded curves
        self.curve_source = curve_source
        # optional ``FlowSampleCache`` (predictors/fm/cache.py): the predictor's network outputs per observed history
        # (bank row, observations, cap remaining, spacing), reused across episodes; never in live mode (the bank
        # changes)
        self.fm_cache = fm_cache if curve_source is None else None
        self.reset()

    # ------------------------------------------------------------------ state
    def reset(self) -> Observation:
        ep, E, K, N = self.ep, self.ep.E, self.K, self.ep.N
        self.t = 0
        self.rows = np.arange(E)
        self.status = np.full((E, N), TaskStatus.PENDING, dtype=np.int8)
        self.valid = ep.valid
        self.slot_task = np.full((E, K), IDLE, dtype=np.int64)
        self.slot_s = np.zeros((E, K), dtype=np.int64)
        self.slot_need = np.full((E, K), NEVER, dtype=np.int64)
        self.slot_deadline = np.zeros((E, K), dtype=np.int64)
        self.slot_arrival = np.zeros((E, K), dtype=np.int64)
        self.slot_cap = np.ones((E, K), dtype=np.int64)
        self.slot_pred = np.zeros((E, K), dtype=np.float64)  # estimate at the last observation
        self.slot_pred_s = np.zeros((E, K), dtype=np.int64)  # processed batches at that observation
        self.slot_pred_lo = np.zeros((E, K), dtype=np.float64)  # the predictor's band (q10, q90) at that observation
        self.slot_pred_hi = np.zeros((E, K), dtype=np.float64)
        self.slot_last_node = np.full((E, K), IDLE, dtype=np.int64)  # node that served the slot at t-1 (hetero only)
        self.slot_started = np.zeros((E, K), dtype=bool)  # served at an earlier step
        self.slot_setup = np.zeros((E, K), dtype=np.int64)  # set-up steps still owed on slot_last_node
        self.setup_steps = np.zeros(E, dtype=np.int64)  # node-steps spent in set-up (diagnostic)
        self.switches = np.zeros(E, dtype=np.int64)  # runs that paid the switch cost
        self.n_queued = np.zeros(E, dtype=np.int64)
        self.succeeded = np.zeros(E, dtype=np.int64)
        self.failed = np.zeros(E, dtype=np.int64)
        self.arrived = np.zeros(E, dtype=np.int64)
        self.turned_away = np.zeros(E, dtype=np.int64)
        self.done = np.zeros(E, dtype=bool)
        # diagnostics
        self.steps = np.zeros(E, dtype=np.int64)
        self.busy = np.zeros(E, dtype=np.int64)
        self.full_steps = np.zeros(E, dtype=np.int64)
        self.queue_sum = np.zeros(E, dtype=np.int64)
        self.ready_time = np.full((E, N), -1, dtype=np.int64)
        self.finish_time = np.full((E, N), -1, dtype=np.int64)
        # reward potential (§4.3): L0 = loss after the first batch
        self.slot_L0 = np.full((E, K), np.nan)
        self.slot_eps = np.ones((E, K))
        self.slot_row = np.zeros((E, K), dtype=np.int64)
        self.phi = np.zeros(E)
        self._arrive_and_admit()
        return self.observe()

    @property
    def n_active(self) -> np.ndarray:
        return (self.slot_task >= 0).sum(axis=1)

    # ------------------------------------------------------------ mechanics
    def _arrive_and_admit(self) -> None:
        t, ep = self.t, self.ep
        new = (ep.arrival == t) & self.valid
        if new.any():
            self.status[new] = TaskStatus.QUEUED
            cnt = new.sum(axis=1)
            self.n_queued += cnt
            self.arrived += cnt
        self._admit_queue_head()
        if self.queue_capacity is not None:
            self._turn_away_overflow()

    def _admit_queue_head(self) -> None:
        """Admit queued tasks in arrival order while fewer than K are active."""
        n_free = self.K - self.n_active
        rows = np.flatnonzero((n_free > 0) & (self.n_queued > 0))
        if len(rows) == 0:
            return
        queued = self.status[rows] == _QUEUED  # [R, N]
        rank = np.cumsum(queued, axis=1)  # 1-based queue position
        admit = queued & (rank <= n_free[rows, None])
        free = self.slot_task[rows] < 0  # [R, K]
        n_admit = admit.sum(axis=1)
        use = free & (np.cumsum(free, axis=1) <= n_admit[:, None])
        ar, at = np.nonzero(admit)  # row-major: per row in queue order
        ur, us = np.nonzero(use)  # per row in slot order; same per-row counts
        er = rows[ar]
        self._fill_slots(er, at, us, rows, n_admit)

    def _turn_away_overflow(self) -> None:
        """Bounded waiting queue: the latest arrivals beyond ``queue_capacity`` waiting tasks leave uncounted."""
        over = self.n_queued - self.queue_capacity
        rows = np.flatnonzero(over > 0)
        if len(rows) == 0:
            return
        queued = self.status[rows] == _QUEUED
        rank_from_back = np.cumsum(queued[:, ::-1], axis=1)[:, ::-1]  # 1 = latest arrival in the queue
        drop = queued & (rank_from_back <= over[rows, None])
        dr, dt = np.nonzero(drop)
        self.status[rows[dr], dt] = TaskStatus.TURNED_AWAY
        self.n_queued[rows] -= over[rows]
        self.turned_away[rows] += over[rows]

    def _fill_slots(self, er, at, us, rows, n_admit) -> None:
        ep = self.ep
        self.status[er, at] = TaskStatus.ACTIVE
        self.n_queued[rows] -= n_admit
        self.slot_task[er, us] = at
        self.slot_s[er, us] = 0
        self.slot_need[er, us] = ep.need[er, at]
        self.slot_deadline[er, us] = ep.deadline[er, at]
        self.slot_arrival[er, us] = ep.arrival[er, at]
        self.slot_cap[er, us] = ep.cap[er, at]
        self.slot_eps[er, us] = ep.eps[er, at]
        self.slot_row[er, us] = ep.curve_row[er, at]
        self.slot_L0[er, us] = np.nan
        self.slot_pred[er, us] = 0.0
        self.slot_pred_lo[er, us] = 0.0
        self.slot_pred_hi[er, us] = 0.0
        self.slot_pred_s[er, us] = 0
        if self.hetero:
            self.slot_last_node[er, us] = IDLE
            self.slot_started[er, us] = False
            self.slot_setup[er, us] = 0

    def observe(self) -> Observation:
        extra = {}
        if self.hetero:
            extra = dict(
                node_speed=None if self.node_speed is None else self.node_speed.copy(),
                switch_cost=self.switch_cost,
                last_node=self.slot_last_node.copy(),
                started=self.slot_started.copy(),
                setup_left=self.slot_setup.copy(),
            )
        return Observation(
            self.t,
            self.slot_task.copy(),
            self.slot_s.copy(),
            self.slot_arrival.copy(),
            self.slot_deadline.copy(),
            self.slot_cap.copy(),
            self.slot_pred.copy(),
            self.slot_pred_s.copy(),
            self.n_queued.copy(),
            self.done.copy(),
            self.M,
            self.K,
            self.obs_every,
            slot_pred_lo=self.slot_pred_lo.copy(),
            slot_pred_hi=self.slot_pred_hi.copy(),
            first_obs=self.first_obs,
            **extra,
        )

    def _serve(self, actions: np.ndarray, served: np.ndarray) -> np.ndarray:
        """Advance ``slot_s`` of the served slots by the batches their nodes process this step; returns the slots
        that processed at least one batch [E, K].

        Identical nodes without switch costs are the case speed 1, cost 0 of :meth:`_serve_on_nodes`: every served
        slot processes exactly one batch. That case is written out on its own because it needs none of the node
        bookkeeping (which node served whom, set-up owed), and it is the paper's setting and the hot path."""
        if not self.hetero:
            self.slot_s += served
            return served
        return self._serve_on_nodes(actions, served)

    def _serve_on_nodes(self, actions: np.ndarray, served: np.ndarray) -> np.ndarray:
        """:meth:`_serve` with node speeds and switch costs (module docstring): a slot served on node i processes
        ``node_speed[i]`` batches, or none while it owes set-up steps after a move or resume."""
        E, K = served.shape
        node = np.full((E, K + 1), IDLE, dtype=np.int64)
        node[self.rows[:, None], actions] = np.arange(self.M)[None, :]  # IDLE lands in the last column
        node = node[:, :K]  # [E, K] node serving each slot this step (IDLE if none)
        if self.switch_cost > 0:
            switch = served & self.slot_started & (node != self.slot_last_node)
            self.slot_setup[switch] = self.switch_cost
            self.switches += switch.sum(axis=1)
            setup = served & (self.slot_setup > 0)
            self.slot_setup[setup] -= 1
            self.setup_steps += setup.sum(axis=1)
            work = served & ~setup
        else:
            work = served
        speed = np.ones(self.M, dtype=np.int64) if self.node_speed is None else self.node_speed
        self.slot_s += np.where(work, speed[np.maximum(node, 0)], 0)
        self.slot_started |= served
        self.slot_last_node = np.where(served, node, IDLE)
        return work

    def _served_mask(self, actions: np.ndarray) -> np.ndarray:
        """Validate node actions [E, M] (slot or IDLE) and return the served-slot mask [E, K]."""
        actions = np.asarray(actions)
        if actions.shape != (self.ep.E, self.M):
            raise ValueError(f"actions must have shape (E, M) = {(self.ep.E, self.M)}, got {actions.shape}")
        if np.any((actions < IDLE) | (actions >= self.K)):
            raise ValueError("actions must be slot indices in [0, K) or IDLE (-1)")
        srt = np.sort(actions, axis=1)
        if np.any((srt[:, 1:] == srt[:, :-1]) & (srt[:, 1:] >= 0)):
            raise ValueError("a task was assigned to two nodes (violates Eq. 2)")
        served = np.zeros((self.ep.E, self.K + 1), dtype=bool)
        served[self.rows[:, None], actions] = True  # IDLE lands in the last column
        served = served[:, : self.K]
        if np.any(served & (self.slot_task < 0)):
            raise ValueError("a node was assigned to an empty slot")
        return served

    def _refresh_request(self, new_obs: np.ndarray) -> dict | None:
        """The predictor query for slots that just got an observation (from ``first_obs`` on), or None if there are
        none."""
        er, ks = np.nonzero(new_obs)
        if len(er) == 0:
            return None
        s = self.slot_s[er, ks]
        if getattr(self.predictor, "privileged", False):  # the perfect-prediction bound reads the true crossing
            est = self.predictor.remaining_from_need(
                self.slot_need[er, ks], s, np.maximum(self.slot_cap[er, ks] - s, 0)
            )
            self.slot_pred[er, ks] = self.slot_pred_lo[er, ks] = self.slot_pred_hi[er, ks] = est
            self.slot_pred_s[er, ks] = s
            return
        n = s // self.obs_every
        H = int(n.max())
        j = np.arange(1, H + 1)
        pts = np.minimum(j[None, :] * self.obs_every, self.slot_cap[er, ks][:, None]) - 1  # batch index of each point
        rows = self.slot_row[er, ks]
        L = self.bank.L[rows[:, None], pts]
        bs = self.ep.batch_size[er, self.slot_task[er, ks]]
        S = (pts + 1) * bs[:, None].astype(np.float64)
        mask = j[None, :] <= n[:, None]
        L = np.where(mask, L, 0.0)
        S = np.where(mask, S, 0.0)
        tk = self.slot_task[er, ks]
        cap_rem = np.maximum(self.slot_cap[er, ks] - s, 0)
        keys = None
        if self.fm_cache is not None:  # the observed history: bank row, n points, horizon, spacing
            keys = list(zip(rows.tolist(), n.tolist(), cap_rem.tolist(), [self.obs_every] * len(rows)))
        return {
            "er": er,
            "ks": ks,
            "tk": tk,
            "s": s,
            "S": S,
            "L": L,
            "n": n,
            "eps": self.slot_eps[er, ks],
            "cap": cap_rem,
            "bs": bs,
            "lr": self.ep.lr[er, tk],
            "family": self.ep.family[er, tk],
            "keys": keys,
        }

    def _refresh_apply(self, req: dict, lo, est, hi, current_only: bool = False) -> None:
        """Write a request's estimates; ``current_only``: only to slots still holding the task they were made for."""
        er, ks, s = req["er"], req["ks"], req["s"]
        if current_only:
            keep = self.slot_task[er, ks] == req["tk"]
            er, ks, s, lo, est, hi = er[keep], ks[keep], s[keep], lo[keep], est[keep], hi[keep]
        self.slot_pred[er, ks] = est
        self.slot_pred_lo[er, ks] = lo
        self.slot_pred_hi[er, ks] = hi
        self.slot_pred_s[er, ks] = s

    def _refresh_predictions(self, new_obs: np.ndarray) -> None:
        """Re-estimate remaining batches for slots that just got an observation (from ``first_obs`` on)."""
        req = self._refresh_request(new_obs)
        if req is None:
            return
        lo, est, hi = predict_band(
            self.predictor,
            req["S"],
            req["L"],
            req["n"],
            req["eps"],
            req["cap"],
            req["bs"],
            req["lr"],
            family=req["family"],
            keys=req["keys"],
            cache=self.fm_cache,
        )
        self._refresh_apply(req, lo, est, hi)

    def _potential(self) -> np.ndarray:
        """Φ per episode: Σ over active slots of q_k (Eq. 13); tasks not yet served contribute 0. [E]"""
        present = self.slot_task >= 0
        started = present & (self.slot_s > 0)
        idx = np.clip(self.slot_s - 1, 0, None)
        Lt = self.bank.L[self.slot_row, np.minimum(idx, self.slot_cap - 1)]
        L0, eps = self.slot_L0, self.slot_eps
        with np.errstate(divide="ignore", invalid="ignore"):
            q = np.log(L0 / np.maximum(Lt, eps)) / np.log(L0 / eps)
        q = np.where(L0 <= eps, 1.0, np.clip(q, 0.0, 1.0))
        return np.where(started, np.nan_to_num(q), 0.0).sum(axis=1)

    def step(self, actions: np.ndarray):
        """Advance one step; returns (observation, reward [E], done [E], successes [E])."""
        out = self._advance(actions)
        return (self.observe(), *out)

    def _advance(self, actions: np.ndarray, defer_refresh: bool = False):
        """The step without its observation -> (reward, done, successes). ``defer_refresh``: leave the predictor
        query in ``self.deferred_refresh`` (None if there is none) for the caller to answer (``step_envs``)."""
        t = self.t
        self.deferred_refresh = None
        live = ~self.done
        served = self._served_mask(actions)
        self.busy += served.sum(axis=1)
        self.steps += live
        self.full_steps += live & (self.n_active >= self.K)
        self.queue_sum += np.where(live, self.n_queued, 0)
        # a step processes 0 (set-up), 1 or several batches of a served slot; every rule below reads only the
        # processed counts before (s_old) and after it, so it is one rule for identical and heterogeneous nodes
        s_old = self.slot_s.copy()
        work = self._serve(actions, served)
        if self.curve_source is not None:  # live: slot_s already holds this step's batches; a lost worker unserves
            self.curve_source.advance(self, actions, served)
            work &= served
        first = work & (s_old == 0)
        # a loss point is due each time the processed count passes a multiple of obs_every up to the cap (a count
        # already at the cap passes none: min(s, cap) // obs_every cannot exceed s_old // obs_every then)
        new_obs = work & (np.minimum(self.slot_s, self.slot_cap) // self.obs_every > s_old // self.obs_every)
        if first.any():
            self.slot_L0[first] = self.bank.L[self.slot_row[first], 0]
        # observations and predictor refresh
        if new_obs.any():
            w = WARMUP_OBS * self.obs_every
            ready_now = new_obs & (s_old < w) & (self.slot_s >= w)
            if ready_now.any():
                er, ks = np.nonzero(ready_now)
                self.ready_time[er, self.slot_task[er, ks]] = t + 1
            if self.predictor is not None:
                warm_obs = new_obs & (self.slot_s >= self.first_obs * self.obs_every)
                if defer_refresh:
                    self.deferred_refresh = self._refresh_request(warm_obs)
                else:
                    self._refresh_predictions(warm_obs)
        # successes
        win = served & (self.slot_s >= self.slot_need)
        # expiry of active tasks
        lose = (self.slot_task >= 0) & ~win & (self.slot_deadline <= t + 1)
        n_win = win.sum(axis=1)
        if win.any() or lose.any():
            er, ks = np.nonzero(win)
            self.status[er, self.slot_task[er, ks]] = TaskStatus.SUCCEEDED
            self.finish_time[er, self.slot_task[er, ks]] = t + 1
            lr_, lk = np.nonzero(lose)
            self.status[lr_, self.slot_task[lr_, lk]] = TaskStatus.FAILED
            self.finish_time[lr_, self.slot_task[lr_, lk]] = t + 1
            self.succeeded += n_win
            self.failed += lose.sum(axis=1)
            gone = win | lose
            self.slot_task[gone] = IDLE
            self.slot_need[gone] = NEVER
            self.slot_s[gone] = 0
        # expiry in the admission queue
        if self.n_queued.any():
            qlose = (self.status == _QUEUED) & (self.ep.deadline <= t + 1)
            if qlose.any():
                self.status[qlose] = TaskStatus.FAILED
                c = qlose.sum(axis=1)
                self.failed += c
                self.n_queued -= c
        self.t = t + 1
        self._arrive_and_admit()
        self.done = (
            (self.t >= self.ep.n_steps)
            & (self.n_queued == 0)
            & (self.slot_task < 0).all(axis=1)
            & (self.arrived == self.ep.n_tasks)
        )
        reward = n_win.astype(np.float64)
        if self.compute_reward:
            phi_next = self._potential()
            reward = reward + self.beta * (phi_next - self.phi)
            self.phi = phi_next
        return reward, self.done.copy(), n_win

    # ------------------------------------------------------------ metrics
    def metrics(self) -> dict[str, np.ndarray]:
        """Per-episode outcome and operational diagnostics (docs/architecture.md). Arrays [E]."""
        n = self.ep.n_tasks - self.turned_away  # tasks turned away at a full waiting queue never entered
        steps = np.maximum(self.steps, 1)
        reached = (self.ready_time >= 0) & self.valid
        n_ready = reached.sum(axis=1)
        ready_sum = np.where(reached, self.ready_time - self.ep.arrival, 0).sum(axis=1)
        ready_mean = np.where(n_ready > 0, ready_sum / np.maximum(n_ready, 1), np.nan)
        return {
            "n_tasks": n.copy(),
            "succeeded": self.succeeded.copy(),
            "failed": self.failed.copy(),
            "success_rate": np.where(n > 0, self.succeeded / np.maximum(n, 1), np.nan),
            "utilization": self.busy / (self.M * steps),
            "queue_full": self.full_steps / steps,
            "waiting": self.queue_sum / steps,
            "ready": ready_mean,
            "steps": self.steps.copy(),
            "turned_away": self.turned_away.copy(),
            "oracle": (((self.ep.need <= self.ep.budget) & self.valid) & (self.status != TaskStatus.TURNED_AWAY)).sum(
                axis=1
            )
            if not self.hetero
            else (
                (isolated_feasible(self.ep.need, self.ep.budget, self.node_speed) & self.valid)
                & (self.status != TaskStatus.TURNED_AWAY)
            ).sum(axis=1),
            **({"setup_steps": self.setup_steps.copy(), "switches": self.switches.copy()} if self.hetero else {}),
        }


def step_envs(envs: list[BatchedEnv], actions: list[np.ndarray]) -> list[tuple]:
    """Step several envs that share one predictor (and FM cache), answering all their predictor refreshes in one
    batched call; -> one ``env.step`` result per env. Estimates are those of ``env.step`` up to the float32 noise
    of a different batch composition; an estimate is written only if its task is still in its slot at the end of
    the step (a task that left this step is not observed again)."""
    outs = [env._advance(a, defer_refresh=True) for env, a in zip(envs, actions)]
    reqs = [(env, env.deferred_refresh) for env in envs if env.deferred_refresh is not None]
    if reqs:
        first = reqs[0][0]
        H = max(r["S"].shape[1] for _, r in reqs)
        pad = lambda a: np.pad(a, ((0, 0), (0, H - a.shape[1])))  # noqa: E731
        cat = lambda k: np.concatenate([r[k] for _, r in reqs])  # noqa: E731
        keys = None if first.fm_cache is None else [k for _, r in reqs for k in r["keys"]]
        lo, est, hi = predict_band(
            first.predictor,
            np.concatenate([pad(r["S"]) for _, r in reqs]),
            np.concatenate([pad(r["L"]) for _, r in reqs]),
            cat("n"),
            cat("eps"),
            cat("cap"),
            cat("bs"),
            cat("lr"),
            family=cat("family"),
            keys=keys,
            cache=first.fm_cache,
        )
        at = 0
        for env, r in reqs:
            b = len(r["er"])
            env._refresh_apply(r, lo[at : at + b], est[at : at + b], hi[at : at + b], current_only=True)
            env.deferred_refresh = None
            at += b
    return [(env.observe(), *out) for env, out in zip(envs, outs)]


def run_episodes(env: BatchedEnv, allocator, max_steps: int | None = None) -> dict[str, np.ndarray]:
    """Roll an allocator through every episode of ``env`` to the end; returns ``env.metrics()``."""
    obs = env.reset()
    allocator.reset(env.ep.E)
    limit = max_steps or (env.ep.horizon + env.ep.n_steps + 2)
    for _ in range(limit):
        if env.done.all():
            break
        obs, _, _, _ = env.step(allocator.act(obs))
    else:
        if not env.done.all():
            raise RuntimeError(f"episodes did not finish within {limit} steps")
    return env.metrics()
