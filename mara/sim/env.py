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

import numpy as np

from mara.core.paths import at_least
from mara.curves.bank import NEVER, CurveBank
from mara.predictors.protocol import WARMUP_OBS, check_first_obs
from mara.sim.estimates import EstimateRefresh
from mara.sim.metrics import episode_metrics
from mara.sim.nodes import charge_switches, check_node_options
from mara.sim.observation import _QUEUED, IDLE, Observation, TaskStatus
from mara.sim.workload import EpisodeBatch


class BatchedEnv(EstimateRefresh):
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
        at_least("sim.nodes", n_nodes, 1)
        at_least("sim.max_active", max_active, 1)
        at_least("sim.obs_every", obs_every, 1)
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
            switch, setup = charge_switches(
                served, self.slot_started, node, self.slot_last_node, self.slot_setup, self.switch_cost
            )
            self.switches += switch.sum(axis=1)
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
        acc = {
            "steps": self.steps,
            "busy": self.busy,
            "full_steps": self.full_steps,
            "queue_sum": self.queue_sum,
            "setup_steps": self.setup_steps,
            "switches": self.switches,
        }
        return episode_metrics(self.ep, self.status, self.ready_time, acc, self.M, self.node_speed, self.switch_cost)


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
