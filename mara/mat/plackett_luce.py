"""Plackett–Luce node assignment: one score per slot and one for idle, M picks without replacement.

Nodes are identical, so one pass of the network scores every choice once — ``scores [E, K+1]`` (K slots, then
idle) — and the joint action is drawn as a sequence of M picks: pick i chooses among the present slots not yet
picked and idle, with probability ∝ exp(score). A picked slot leaves the pool (Eq. 2); idle never does, so it may
be chosen by any number of nodes. The exact log-probability of an ordered joint action ``a [E, M]`` is

    log π(a) = Σ_i [ s_{a_i} − logsumexp_{c ∈ allowed_i} s_c ],   allowed_i = {present slots ∉ a_<i} ∪ {idle},

which ``masked_logits`` + ``log_softmax`` evaluate for every node at once (teacher-forced, O(M·K) elementwise; the
network cost does not depend on M). Deterministic decoding takes the most likely joint action (``mode``): the j best
present slots in score order, then idle, for the best j. Pure functions; shapes ``E`` episodes, ``K`` slots,
``M`` nodes.
"""

from __future__ import annotations

import torch

from mara.mat.masks import choice_mask
from mara.mat.softmax import log_softmax_last


def masked_logits(scores: torch.Tensor, present: torch.Tensor, actions: torch.Tensor) -> torch.Tensor:
    """Per-node logits of the pick sequence ``actions [E, M]`` (0..K): scores [E, K+1] with the choices not allowed
    at each pick masked to the dtype's minimum -> [E, M, K+1]."""
    allow = choice_mask(present, actions)
    logits = scores[:, None, :].expand(-1, actions.shape[1], -1)
    return logits.masked_fill(~allow, torch.finfo(scores.dtype).min)


def log_prob(scores: torch.Tensor, present: torch.Tensor, actions: torch.Tensor) -> torch.Tensor:
    """Exact log-probability [E] of the ordered joint action ``actions [E, M]``."""
    logp = log_softmax_last(masked_logits(scores, present, actions))
    return logp.gather(2, actions[..., None]).squeeze(-1).sum(dim=1)


def mode(scores: torch.Tensor, present: torch.Tensor, n_nodes: int) -> torch.Tensor:
    """The most likely ordered joint action -> actions [E, M].

    Not the pick-by-pick argmax: idle never leaves the pool, so once idle is the best choice it stays the best, and
    greedy decoding serves nothing whenever idle's score edges out every slot's, although serving the best slot and
    then idling is then more likely. For j served slots the most likely sequence serves the j best present slots in
    score order and then idles (swapping in a better slot or an earlier slot pick only raises the probability), so
    the mode is the best of these M + 1 candidates, each scored by the exact log-probability (O(K) per row)."""
    E, K1 = scores.shape
    K = K1 - 1
    neg = torch.finfo(scores.dtype).min
    srt, order = scores[:, :K].masked_fill(~present, neg).sort(dim=1, descending=True)  # [E, K]
    idle = scores[:, K:]  # [E, 1]
    tail = torch.logcumsumexp(srt.flip(1), dim=1).flip(1)  # logsumexp of srt[i:], i = 0..K-1
    tail = torch.cat([tail, tail.new_full((E, 1), float("-inf"))], dim=1)  # [E, K+1]
    log_z = torch.logaddexp(tail, idle)  # pool normaliser once the i best slots are gone
    served = torch.cat([srt.new_zeros(E, 1), (srt - log_z[:, :K]).cumsum(dim=1)], dim=1)  # j slots picked first
    j = torch.arange(K + 1, device=scores.device)
    total = served + (n_nodes - j).clamp(min=0) * (idle - log_z)  # then M - j idles
    ok = (j[None, :] <= n_nodes) & (j[None, :] <= present.sum(dim=1, keepdim=True))
    best = torch.where(ok, total, torch.full_like(total, float("-inf"))).argmax(dim=1)  # ties: fewer slots
    pos = torch.arange(n_nodes, device=scores.device)
    slots = order[:, :n_nodes] if n_nodes <= K else torch.cat([order, order.new_full((E, n_nodes - K), K)], dim=1)
    return torch.where(pos[None, :] < best[:, None], slots, torch.full_like(slots, K))


def sample(
    scores: torch.Tensor,
    present: torch.Tensor,
    n_nodes: int,
    deterministic: bool = False,
    generator: torch.Generator | None = None,
) -> torch.Tensor:
    """Draw M sequential picks -> actions [E, M] long in 0..K; ``deterministic``: the most likely joint action
    (``mode``). Each pick is a Gumbel-max draw over the choices still allowed, i.e. an exact categorical draw from
    the renormalised scores; a picked slot is closed to later picks, idle stays open."""
    if deterministic:
        return mode(scores, present, n_nodes)
    E, K1 = scores.shape
    K = K1 - 1
    allow = torch.cat([present, present.new_ones(E, 1)], dim=1)
    rows = torch.arange(E, device=scores.device)
    actions = torch.empty((E, n_nodes), dtype=torch.long, device=scores.device)
    neg = torch.finfo(scores.dtype).min
    gen_device = generator.device if generator is not None else scores.device  # a CPU generator may drive a GPU policy
    u = torch.rand((n_nodes, E, K1), generator=generator, device=gen_device, dtype=scores.dtype).to(scores.device)
    gumbel = -torch.log(-torch.log(u.clamp(1e-20, 1.0 - 1e-7)))
    for i in range(n_nodes):
        a = (scores.masked_fill(~allow, neg) + gumbel[i]).argmax(dim=-1)
        actions[:, i] = a
        allow[rows, a] = a == K  # a taken slot is closed to later picks; idle stays open
    return actions
