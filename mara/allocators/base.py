"""The allocator interface (docs/allocators.md): one protocol, several implementations chosen by config.

An allocator gets the batched ``Observation`` of step t and returns ``actions [E, M]``: for each node a
slot index in ``[0, K)`` or ``IDLE`` (-1), never the same slot twice in a row (Eq. 2).
"""

from __future__ import annotations

from typing import Protocol, runtime_checkable

import numpy as np

from mara.sim.env import IDLE, Observation


@runtime_checkable
class Allocator(Protocol):
    name: str

    def reset(self, n_episodes: int) -> None:
        """Start a new batch of episodes."""

    def act(self, obs: Observation) -> np.ndarray:
        """Actions [E, M] for the observation."""


def take_smallest(key: np.ndarray, present: np.ndarray, n_nodes: int) -> np.ndarray:
    """Assign the (up to) n_nodes present slots with the smallest key to nodes 0..; rest IDLE.

    key [E, K] float/int, present [E, K] bool -> actions [E, M] int (slot indices in ascending key order).
    """
    E, K = key.shape
    big = np.finfo(np.float64).max
    k = np.where(present, key.astype(np.float64), big)
    m = min(n_nodes, K)
    order = np.argsort(k, axis=1, kind="stable")[:, :m]
    ok = np.take_along_axis(present, order, axis=1)
    actions = np.full((E, n_nodes), IDLE, dtype=np.int64)
    actions[:, :m] = np.where(ok, order, IDLE)
    return actions
