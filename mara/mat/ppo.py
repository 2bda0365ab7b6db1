"""One PPO update over a collected rollout (shared by ``MATModule.training_step`` and ``python -m mara.bench``).

``flatten`` turns a ``RolloutBuffer`` and its GAE into flat samples of the live steps; ``update`` runs
``update_epochs`` × ``n_minibatches`` clipped-surrogate steps on them. Backward and gradient clipping are passed in
(Lightning's ``manual_backward``/``clip_gradients`` under DDP; plain torch in the benchmark), so both run the same work.
"""

from __future__ import annotations

import math

import torch

from mara.mat.losses import (
    entropy_bonus,
    mat_loss,
    ppo_clip_loss,
    ppo_diagnostics,
    value_loss,
)
from mara.mat.settings import PPOSettings, RolloutSettings


def n_minibatches(ppo: PPOSettings, rollout: RolloutSettings) -> int:
    """Minibatches per epoch: ``ppo.minibatch_size`` (samples, of the nominal n_episodes × n_steps rollout) when set,
    else ``ppo.n_minibatches``. Fixed by config, so every DDP rank runs the same number of steps."""
    if ppo.minibatch_size:
        return max(1, math.ceil(rollout.n_episodes * rollout.n_steps / int(ppo.minibatch_size)))
    return int(ppo.n_minibatches)


def flatten(buf, advantages: torch.Tensor, returns: torch.Tensor) -> dict[str, torch.Tensor]:
    """Live samples of a rollout [T, E, ...] -> dict of [B, ...] tensors."""
    live = buf.live.reshape(-1)
    flat = lambda x: x.reshape(-1, *x.shape[2:])[live]  # noqa: E731
    out = {
        "tokens": flat(buf.tokens),
        "present": flat(buf.present),
        "actions": flat(buf.actions),
        "logprobs": flat(buf.logprobs),
        "values": flat(buf.values),
        "advantages": flat(advantages),
        "returns": flat(returns),
    }
    if getattr(buf, "nodes", None) is not None:  # a policy with a node head placed its picks (mara/mat/node_choice.py)
        out.update(pairs=flat(buf.pairs), nodes=flat(buf.nodes), order=buf.order)
    return out


def update(
    policy,
    opt,
    batch: dict,
    ppo: PPOSettings,
    n_mb: int,
    generator: torch.Generator,
    backward,
    clip,
    value_only: bool = False,
) -> dict[str, list[float]]:
    """``update_epochs`` passes of ``n_mb`` minibatches; ``backward(loss)`` and ``clip()`` do the framework's part.
    ``value_only``: fit the value loss only (policy terms kept at weight 0, so DDP sees every parameter). The value
    loss still reaches the encoder the policy shares, so the policy moves too; ``ppo.value_warmup_head_only: true``
    (mat=hetero) steps only the value head's parameters then, leaving the policy exactly as it was (there,
    without it, the clone's approximate KL reached 1.3 per iteration during the warm-up and the policy collapsed
    to idling)."""
    head_only = value_only and bool(ppo.value_warmup_head_only)
    head = {id(p) for p in policy.value_head.parameters()} if head_only else set()
    stats = {k: [] for k in ("policy_loss", "value_loss", "entropy", "approx_kl", "clipfrac")}
    n = len(batch["logprobs"])
    for _ in range(ppo.update_epochs):
        perm = torch.randperm(n, generator=generator).to(batch["logprobs"].device)
        for idx in torch.tensor_split(perm, n_mb):
            if "nodes" in batch:
                newlogprob, entropy, newvalue = policy.evaluate_nodes(
                    batch["tokens"][idx],
                    batch["present"][idx],
                    batch["actions"][idx],
                    batch["pairs"][idx],
                    batch["nodes"][idx],
                    batch["order"],
                )
            else:
                newlogprob, entropy, newvalue = policy.evaluate(
                    batch["tokens"][idx], batch["present"][idx], batch["actions"][idx]
                )
            adv = batch["advantages"][idx]
            if ppo.norm_adv and len(idx) > 1:
                adv = (adv - adv.mean()) / (adv.std() + 1e-8)
            old = batch["logprobs"][idx]
            pg_loss = ppo_clip_loss(newlogprob, old, adv, ppo.clip_coef)
            v_loss = value_loss(newvalue, batch["returns"][idx])
            ent = entropy_bonus(entropy)
            loss = mat_loss(pg_loss, v_loss, ent, ppo.vf_coef, ppo.ent_coef)
            if value_only:
                loss = ppo.vf_coef * v_loss + 0.0 * loss
            opt.zero_grad()
            backward(loss)
            if head_only:  # Adam skips parameters without a gradient: only the value head moves
                for p in policy.parameters():
                    if id(p) not in head:
                        p.grad = None
            clip()
            opt.step()
            with torch.no_grad():
                diag = ppo_diagnostics(newlogprob, old, ppo.clip_coef)
            for k, v in (("policy_loss", pg_loss), ("value_loss", v_loss), ("entropy", ent), *diag.items()):
                stats[k].append(float(v.detach()))
    return stats
