"""A Gymnasium view of one episode of the batched simulator, with an action mask.

Observation (``Dict``): ``tasks [K, 6]`` float32 per slot — present, predicted remaining batches,
remaining time, processed batches, warm-up fraction, batches left to the cap (batch counts divided by
``scale``) — ``nodes [2]`` (active / K, queued / K) and ``action_mask [K + 1]`` int8 (slot k selectable;
the last entry, idle, always 1). Action: ``MultiDiscrete([K + 1] * M)``, node i choosing a slot or K for
idle. A choice of an empty slot, or of a slot an earlier node already took, is executed as idle
(earlier nodes win), so every action is valid; ``info["repaired"]`` counts such repairs.
"""

from __future__ import annotations

import gymnasium as gym
import numpy as np
from gymnasium import spaces

from mara.curves.bank import CurveBank
from mara.sim.env import IDLE, BatchedEnv, Observation
from mara.sim.workload import PAPER_TASK_SETS, TaskSet, generate_episodes


class MARAGymEnv(gym.Env):
    """One random-arrival episode per reset; reward = successes (+ shaping if ``dense``)."""

    metadata = {"render_modes": []}

    def __init__(
        self,
        bank: CurveBank,
        family_params: dict | None = None,
        task_set: TaskSet = PAPER_TASK_SETS["ID"],
        load: float = 0.04,
        n_nodes: int = 7,
        max_active: int = 10,
        n_steps: int = 500,
        dense: bool = True,
        predictor=None,
        scale: float = 350.0,
    ) -> None:
        self.bank, self.family_params = bank, family_params or bank.family_params
        self.task_set, self.load, self.n_steps = task_set, load, n_steps
        self.M, self.K, self.dense, self.predictor, self.scale = n_nodes, max_active, dense, predictor, scale
        self.observation_space = spaces.Dict(
            {
                "tasks": spaces.Box(0.0, np.inf, shape=(max_active, 6), dtype=np.float32),
                "nodes": spaces.Box(0.0, np.inf, shape=(2,), dtype=np.float32),
                "action_mask": spaces.Box(0, 1, shape=(max_active + 1,), dtype=np.int8),
            }
        )
        self.action_space = spaces.MultiDiscrete([max_active + 1] * n_nodes)
        self._env: BatchedEnv | None = None
        self._episode = 0

    def _convert(self, obs: Observation) -> dict:
        f = np.stack(
            [
                obs.present[0].astype(np.float32),
                obs.pred_remaining[0] / self.scale,
                np.maximum(obs.remaining_time[0], 0) / self.scale,
                obs.processed[0] / self.scale,
                obs.warmup[0],
                obs.cap_remaining[0] / self.scale,
            ],
            axis=1,
        ).astype(np.float32)
        mask = np.ones(self.K + 1, dtype=np.int8)
        mask[: self.K] = obs.present[0]
        nodes = np.array([obs.n_active[0] / self.K, obs.n_queued[0] / self.K], dtype=np.float32)
        return {"tasks": f, "nodes": nodes, "action_mask": mask}

    def reset(self, *, seed: int | None = None, options: dict | None = None):
        super().reset(seed=seed)
        root = int(self.np_random.integers(2**31 - 1))
        ep = generate_episodes(self.bank, self.family_params, self.task_set, self.load, root, 1, self.n_steps)
        self._env = BatchedEnv(ep, self.bank, self.M, self.K, predictor=self.predictor, compute_reward=self.dense)
        self._obs = self._env.reset()
        return self._convert(self._obs), {"n_tasks": int(ep.n_tasks[0])}

    def step(self, action):
        action = np.asarray(action, dtype=np.int64).reshape(self.M)
        slots = np.where(action >= self.K, IDLE, action)
        taken, repaired = set(), 0
        for i, s in enumerate(slots):
            if s == IDLE:
                continue
            if not self._obs.present[0, s] or s in taken:
                slots[i] = IDLE
                repaired += 1
            else:
                taken.add(int(s))
        self._obs, reward, done, wins = self._env.step(slots[None, :])
        info = {"successes": int(wins[0]), "repaired": repaired}
        if done[0]:
            info["metrics"] = {k: float(v[0]) for k, v in self._env.metrics().items()}
        return self._convert(self._obs), float(reward[0]), bool(done[0]), False, info
