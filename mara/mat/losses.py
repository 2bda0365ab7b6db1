"""PPO math as pure functions (Eq. 10–12) and GAE. Shapes: ``[T, E]`` rollout steps × episodes, ``[B]`` samples."""

from __future__ import annotations

import torch


def gae(rewards, values, dones, last_value, gamma: float = 1.0, lam: float = 0.95):
    """Generalised advantage estimation -> (advantages [T, E], returns [T, E]).

    rewards, values, dones [T, E]: ``dones[t] = 1`` when the transition at t ended the episode (no bootstrap
    past it); ``last_value [E]`` is V of the state after the last step.
    """
    T = rewards.shape[0]
    advantages = torch.zeros_like(rewards)
    lastgaelam = torch.zeros_like(last_value)
    for t in reversed(range(T)):
        next_value = last_value if t == T - 1 else values[t + 1]
        nonterminal = 1.0 - dones[t].float()
        delta = rewards[t] + gamma * next_value * nonterminal - values[t]
        lastgaelam = delta + gamma * lam * nonterminal * lastgaelam
        advantages[t] = lastgaelam
    return advantages, advantages + values


def ppo_clip_loss(new_logprob, old_logprob, advantages, clip_coef: float = 0.2):
    """Minus the clipped surrogate (−L_clip, Eq. 10) averaged over samples [B] -> scalar."""
    ratio = (new_logprob - old_logprob).exp()
    pg1 = -advantages * ratio
    pg2 = -advantages * ratio.clamp(1 - clip_coef, 1 + clip_coef)
    return torch.max(pg1, pg2).mean()


def value_loss(values, returns):
    """L_V = ½ E[(V − R)²] (Eq. 11) -> scalar."""
    return 0.5 * (values - returns).pow(2).mean()


def entropy_bonus(entropy):
    """H = E[H(π(·|o))] over samples [B] -> scalar."""
    return entropy.mean()


def mat_loss(pg_loss, v_loss, entropy, vf_coef: float = 1.0, ent_coef: float = 0.01):
    """L_MAT = −L_clip + c_v L_V − c_e H (Eq. 12); ``pg_loss`` is already −L_clip."""
    return pg_loss + vf_coef * v_loss - ent_coef * entropy


def ppo_diagnostics(new_logprob, old_logprob, clip_coef: float = 0.2) -> dict[str, torch.Tensor]:
    """approx_kl (the (r−1) − log r estimator) and clip fraction over samples [B]."""
    logratio = new_logprob - old_logprob
    ratio = logratio.exp()
    return {
        "approx_kl": ((ratio - 1) - logratio).mean(),
        "clipfrac": ((ratio - 1.0).abs() > clip_coef).float().mean(),
    }


def explained_variance(y_pred, y_true) -> float:
    """1 − Var[y − ŷ] / Var[y] over [B] (nan when Var[y] = 0)."""
    var_y = torch.var(y_true)
    return float("nan") if var_y == 0 else float(1 - torch.var(y_true - y_pred) / var_y)
