"""Work-conserving rule baselines: FIFO (earliest arrival first) and EDF (earliest deadline first)."""
from __future__ import annotations

import numpy as np

from mara.allocators.base import take_smallest
from mara.sim.env import Observation


class FIFO:
    """Serve the M earliest-arrived active tasks (ties: admission order)."""

    name = "FIFO"

    def reset(self, n_episodes: int) -> None:
        pass

    def act(self, obs: Observation) -> np.ndarray:
        # task index is the arrival order, so it breaks arrival ties deterministically
        return take_smallest(obs.task, obs.present, obs.n_nodes)


class EDF:
    """Serve the M active tasks with the earliest deadlines (ties: earlier arrival)."""

    name = "EDF"

    def reset(self, n_episodes: int) -> None:
        pass

    def act(self, obs: Observation) -> np.ndarray:
        key = obs.deadline.astype(np.float64) * 1e6 + obs.task
        return take_smallest(key, obs.present, obs.n_nodes)
