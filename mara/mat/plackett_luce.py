"""Plackett–Luce node assignment (issue 22): one score per slot and one for idle, M picks without replacement.

Nodes are identical, so one pass of the network scores every choice once — ``scores [E, K+1]`` (K slots, then
idle) — and the joint action is drawn as a sequence of M picks: pick i chooses among the present slots not yet
picked and idle, with probability ∝ exp(score). A picked slot leaves the pool (Eq. 2); idle never does, so it may
be chosen by any number of nodes. The exact log-probability of an ordered joint action ``a [E, M]`` is

    log π(a) = Σ_i [ s_{a_i} − logsumexp_{c ∈ allowed_i} s_c ],   allowed_i = {present slots ∉ a_<i} ∪ {idle},

which ``masked_logits`` + ``log_softmax`` evaluate for every node at once (teacher-forced, O(M·K) elementwise; the
network cost does not depend on M). Argmax decoding serves the present slots whose score beats idle's, best first,
up to M of them. Pure functions; shapes ``E`` episodes, ``K`` slots, ``M`` nodes.
"""
from __future__ import annotations

import torch

from mara.mat.masks import choice_mask


def masked_logits(scores: torch.Tensor, present: torch.Tensor, actions: torch.Tensor) -> torch.Tensor:
    """Per-node logits of the pick sequence ``actions [E, M]`` (0..K): scores [E, K+1] with the choices not allowed
    at each pick masked to the dtype's minimum -> [E, M, K+1]."""
    allow = choice_mask(present, actions)
    logits = scores[:, None, :].expand(-1, actions.shape[1], -1)
    return logits.masked_fill(~allow, torch.finfo(scores.dtype).min)


def log_prob(scores: torch.Tensor, present: torch.Tensor, actions: torch.Tensor) -> torch.Tensor:
    """Exact log-probability [E] of the ordered joint action ``actions [E, M]``."""
    logp = torch.log_softmax(masked_logits(scores, present, actions), dim=-1)
    return logp.gather(2, actions[..., None]).squeeze(-1).sum(dim=1)


def sample(scores: torch.Tensor, present: torch.Tensor, n_nodes: int, deterministic: bool = False,
           generator: torch.Generator | None = None) -> torch.Tensor:
    """Draw (or, ``deterministic``, take the argmax of) M sequential picks -> actions [E, M] long in 0..K.

    Each pick is a Gumbel-max draw over the choices still allowed, i.e. an exact categorical draw from the
    renormalised scores; a picked slot is closed to later picks, idle stays open."""
    E, K1 = scores.shape
    K = K1 - 1
    allow = torch.cat([present, present.new_ones(E, 1)], dim=1)
    rows = torch.arange(E, device=scores.device)
    actions = torch.empty((E, n_nodes), dtype=torch.long, device=scores.device)
    neg = torch.finfo(scores.dtype).min
    if not deterministic:
        gen_device = generator.device if generator is not None else scores.device  # a CPU generator may drive a GPU policy
        u = torch.rand((n_nodes, E, K1), generator=generator, device=gen_device, dtype=scores.dtype).to(scores.device)
        gumbel = -torch.log(-torch.log(u.clamp(1e-20, 1.0 - 1e-7)))
    for i in range(n_nodes):
        logits = scores.masked_fill(~allow, neg)
        a = (logits if deterministic else logits + gumbel[i]).argmax(dim=-1)
        actions[:, i] = a
        allow[rows, a] = a == K  # a taken slot is closed to later picks; idle stays open
    return actions
