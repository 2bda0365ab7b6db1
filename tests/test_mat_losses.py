"""PPO math against hand-worked values: GAE (γ = 1), clipped surrogate, value loss; Eq. 15 for the shaped reward."""

import numpy as np
import pytest
import torch

from mara.mat.losses import (
    explained_variance,
    gae,
    mat_loss,
    ppo_clip_loss,
    ppo_diagnostics,
    value_loss,
)
from mara.sim.env import IDLE, BatchedEnv

torch.set_num_threads(1)
T_ = lambda *x: torch.tensor(x, dtype=torch.float32)[:, None]  # noqa: E731  [T, E=1]


def test_gae_by_hand_gamma_one():
    rewards, values = T_(1.0, 0.0, 2.0), T_(0.5, 1.0, 1.5)
    # no termination, bootstrap V = 2 after the last step, λ = 0.5:
    # δ2 = 2 + 2 − 1.5 = 2.5; δ1 = 0 + 1.5 − 1 = 0.5; δ0 = 1 + 1 − 0.5 = 1.5
    # A2 = 2.5; A1 = 0.5 + 0.5·2.5 = 1.75; A0 = 1.5 + 0.5·1.75 = 2.375
    adv, ret = gae(rewards, values, T_(0, 0, 0), torch.tensor([2.0]), gamma=1.0, lam=0.5)
    torch.testing.assert_close(adv, T_(2.375, 1.75, 2.5))
    torch.testing.assert_close(ret, T_(2.875, 2.75, 4.0))


def test_gae_stops_at_episode_end():
    rewards, values = T_(1.0, 0.0, 2.0), T_(0.5, 1.0, 1.5)
    # the transition at t = 1 ends the episode: δ1 = 0 − 1 = −1 and nothing flows back across it
    adv, _ = gae(rewards, values, T_(0, 1, 0), torch.tensor([2.0]), gamma=1.0, lam=0.5)
    torch.testing.assert_close(adv, T_(1.5 - 0.5, -1.0, 2.5))


def test_gae_lambda_one_is_monte_carlo_return():
    rewards, values = T_(1.0, 3.0, 2.0), T_(0.3, -1.0, 4.0)
    adv, ret = gae(rewards, values, T_(0, 0, 1), torch.tensor([9.0]), gamma=1.0, lam=1.0)
    torch.testing.assert_close(ret, T_(6.0, 5.0, 2.0))  # undiscounted rewards-to-go, bootstrap ignored


def test_ppo_loss_at_ratio_one_is_minus_mean_advantage():
    logp = torch.randn(50)
    adv = torch.randn(50)
    torch.testing.assert_close(ppo_clip_loss(logp, logp.clone(), adv, 0.2), -adv.mean())
    d = ppo_diagnostics(logp, logp.clone())
    assert float(d["approx_kl"]) == 0.0 and float(d["clipfrac"]) == 0.0


def test_ppo_loss_clips_ratio():
    old = torch.zeros(2)
    new = torch.log(torch.tensor([1.5, 0.5]))
    adv = torch.tensor([1.0, -1.0])
    # ratio 1.5, A > 0 → clipped to 1.2; ratio 0.5, A < 0 → clipped to 0.8: loss = −mean(1.2, −0.8)
    torch.testing.assert_close(ppo_clip_loss(new, old, adv, 0.2), torch.tensor(-(1.2 - 0.8) / 2))


def test_value_loss_entropy_combination():
    assert float(value_loss(torch.tensor([1.0, 3.0]), torch.tensor([0.0, 0.0]))) == pytest.approx(2.5)
    assert float(mat_loss(torch.tensor(1.0), torch.tensor(2.0), torch.tensor(3.0), 1.0, 0.01)) == pytest.approx(2.97)
    y = torch.randn(100)
    assert explained_variance(y, y) == pytest.approx(1.0)


@pytest.mark.parametrize("policy", ["random", "fifo"])
def test_shaped_rewards_sum_to_successes(policy):
    """Eq. 15: with γ = 1 the β-shaped rewards of a whole episode sum to its number of successes."""
    from mara.allocators.rules import FIFO
    from mara.curves.bank import default_bank_path, load_bank
    from mara.sim.workload import PAPER_TASK_SETS, generate_episodes

    bank = load_bank(default_bank_path())
    ep = generate_episodes(bank, bank.family_params, PAPER_TASK_SETS["ID"], 0.06, 424_242, 6, n_steps=150)
    env = BatchedEnv(ep, bank, compute_reward=True, beta=0.1)
    obs = env.reset()
    rng = np.random.default_rng(0)
    total = np.zeros(ep.E)
    shaping_seen = False
    while not env.done.all():
        if policy == "fifo":
            a = FIFO().act(obs)
        else:  # random matching: each node a random free present slot or idle
            a = np.full((ep.E, env.M), IDLE)
            for e in range(ep.E):
                slots = rng.permutation(np.flatnonzero(obs.present[e]))[: env.M]
                a[e, : len(slots)] = slots
                rng.shuffle(a[e])
        live = ~obs.done
        obs, r, done, succ = env.step(a)
        shaping_seen |= bool(np.any(np.abs(r - succ) > 1e-6))
        total += np.where(live, r, 0.0)
    assert shaping_seen
    np.testing.assert_allclose(total, env.succeeded, atol=1e-9)


def test_minibatch_count_from_config():
    """``ppo.minibatch_size`` (samples of the nominal rollout) overrides ``ppo.n_minibatches``; same count on every
    rank."""
    from mara.mat.ppo import n_minibatches
    from mara.mat.settings import PPOSettings, RolloutSettings

    ro = RolloutSettings(n_episodes=512, n_steps=32)
    assert n_minibatches(PPOSettings(n_minibatches=8), ro) == 8
    assert n_minibatches(PPOSettings(n_minibatches=8, minibatch_size=None), ro) == 8
    assert n_minibatches(PPOSettings(n_minibatches=8, minibatch_size=4096), ro) == 4
    assert n_minibatches(PPOSettings(n_minibatches=8, minibatch_size=5000), ro) == 4  # ceil(16384 / 5000)
    assert n_minibatches(PPOSettings(n_minibatches=8, minibatch_size=10**6), ro) == 1
