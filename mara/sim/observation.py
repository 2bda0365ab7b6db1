"""What allocators see of the batched simulator (mara/sim/env.py): the slot value ``IDLE``, the tasks' statuses, and
the ``Observation`` of one step, ``[E, K]`` arrays over episodes × active slots (the scheduler view of
``mara.sched.interface.JobsView`` in this engine's layout: one GPU per task, the nodes are the GPUs).
"""

from __future__ import annotations

from enum import IntEnum
from functools import cached_property

import numpy as np

from mara.predictors.protocol import WARMUP_OBS

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

    @property
    def arrival_rank(self) -> np.ndarray:  # [E, K] int arrival order (the task index), the scheduler view's name
        return self.task

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
