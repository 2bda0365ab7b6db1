"""Work-conserving rule baselines: FIFO (earliest arrival first) and EDF (earliest deadline first).

On heterogeneous nodes / with switch costs the chosen tasks are placed by
``mara.allocators.placement.place`` with the observable generation cap as the remaining demand (the rules
use no predictor): the earliest-ranked task first, each on the free node where it would finish soonest,
running tasks kept on their node unless a faster node pays for the set-up. ``choose`` returns the priority order
before placement (an imitation label), ``act`` the placed actions."""

from __future__ import annotations

import numpy as np

from mara.allocators.base import take_smallest
from mara.allocators.placement import place
from mara.sim.env import Observation


class FIFO:
    """Serve the M earliest-arrived active tasks (ties: admission order)."""

    name = "FIFO"

    def reset(self, n_episodes: int) -> None:
        pass

    def choose(self, obs: Observation) -> tuple[np.ndarray, np.ndarray]:
        """(picks [E, M] in priority order, remaining demand for the placement)."""
        # task index is the arrival order, so it breaks arrival ties deterministically
        return take_smallest(obs.task, obs.present, obs.n_nodes), obs.cap_remaining if getattr(
            obs, "hetero", False
        ) else None

    def act(self, obs: Observation) -> np.ndarray:
        return place(obs, *self.choose(obs))


class EDF:
    """Serve the M active tasks with the earliest deadlines (ties: earlier arrival)."""

    name = "EDF"

    def reset(self, n_episodes: int) -> None:
        pass

    def choose(self, obs: Observation) -> tuple[np.ndarray, np.ndarray]:
        """(picks [E, M] in priority order, remaining demand for the placement)."""
        key = obs.deadline.astype(np.float64) * 1e6 + obs.task
        return take_smallest(key, obs.present, obs.n_nodes), obs.cap_remaining if getattr(
            obs, "hetero", False
        ) else None

    def act(self, obs: Observation) -> np.ndarray:
        return place(obs, *self.choose(obs))
