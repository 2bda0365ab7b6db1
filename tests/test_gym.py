"""The Gymnasium wrapper passes the environment checker and repairs invalid node choices."""

import numpy as np
import pytest
from gymnasium.utils.env_checker import check_env

from mara.sim.gym_env import MARAGymEnv


@pytest.mark.filterwarnings("ignore")
def test_env_checker(small_bank):
    check_env(MARAGymEnv(small_bank, n_steps=60), skip_render_check=True)


def test_dense_rewards_sum_to_successes(small_bank):
    env = MARAGymEnv(small_bank, n_steps=80, load=0.1, dense=True)
    obs, info = env.reset(seed=3)
    total, done = 0.0, False
    while not done:
        mask = obs["action_mask"][:-1]
        slots = np.flatnonzero(mask)[: env.M]
        action = np.full(env.M, env.K)
        action[: len(slots)] = slots
        obs, r, done, trunc, info = env.step(action)
        total += r
    assert total == pytest.approx(info["metrics"]["succeeded"], abs=1e-9)  # Eq. 15


def test_invalid_choices_become_idle(small_bank):
    env = MARAGymEnv(small_bank, n_steps=40, load=0.3)
    obs, _ = env.reset(seed=0)
    while obs["action_mask"][:-1].sum() == 0:
        obs, *_ = env.step(np.full(env.M, env.K))
    slot = int(np.flatnonzero(obs["action_mask"][:-1])[0])
    empty = [k for k in range(env.K) if not obs["action_mask"][k]]
    action = np.full(env.M, env.K)
    action[0] = action[1] = slot
    if empty:
        action[2] = empty[0]
    _, _, _, _, info = env.step(action)
    assert info["repaired"] == 1 + bool(empty)
