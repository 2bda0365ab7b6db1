"""The policy's node choice on unequal nodes: which node each task it serves runs on (a (task, node) action).

The Plackett–Luce decoder chooses which tasks run and in which priority order (mara/mat/plackett_luce.py). On the
paper's identical nodes with free preemption that is the whole decision. On unequal nodes or with switch costs a
policy with ``mat.net.node_head: true`` also chooses the nodes: the nodes, fastest first (ties by index), each take
one of the chosen tasks not yet placed or stay idle, with probability ∝ exp(score), where a node's score for a task
reads the pair's features (below) and the task's encoding. Exactly as many nodes serve as tasks were chosen, so a node
may idle only while more nodes than chosen tasks are left, and must idle once none is left:

    log π(nodes | chosen) = Σ_i [ s_{n_i, a_i} − logsumexp_{c ∈ allowed_i} s_{n_i, c} ]

(``allowed_i``: the chosen tasks not placed by nodes n_0..n_{i-1}, and idle while it is still allowed). The policy's
log-probability of the whole action is that of its picks plus this. Without the head the picks are placed by the
rules' placement (``mara.allocators.placement.place_policy``), a fixed function.

Pair features (``pair_features``, from the observation only, [E, M, K, N_PAIR]; batch and step counts / ``scale``):
the node's speed relative to the fastest; whether the task ran on this node at t−1; the set-up it would owe here (the
steps left of its set-up on its own node, the switch cost elsewhere once started, 0 for a first start) / 10; its
slack here (remaining time − set-up − remaining batches / speed) at the band's median, lower and upper ends; its
expected finishing step here. ``dynamic_channels`` adds what depends on the chosen set: the task's rank in the
priority order (/ M), whether it ran on another node at t−1 and whether another chosen task ran on this node.

Pure functions; shapes ``E`` episodes, ``M`` nodes, ``K`` slots.
"""

from __future__ import annotations

import numpy as np
import torch

from mara.allocators.placement import demand

N_PAIR = 7  # static pair features (pair_features)
N_DYNAMIC = 3  # rank, ran elsewhere at t-1, this node held by another chosen task (dynamic_channels)


def pair_features(obs, scale: float = 350.0) -> np.ndarray:
    """Static (node, task) features [E, M, K, N_PAIR] float32 (module docstring); zero for absent slots."""
    speed = np.asarray(obs.node_speed, dtype=np.float64)  # [M]
    M = speed.shape[0]
    present = np.asarray(obs.present)
    E, K = present.shape
    last = np.asarray(obs.last_node)
    started = np.asarray(obs.started, dtype=bool)
    setup = np.asarray(obs.setup_left, dtype=np.float64)
    tau = np.asarray(obs.remaining_time, dtype=np.float64)[:, None, :]  # [E, 1, K]
    here = last[:, None, :] == np.arange(M)[None, :, None]  # [E, M, K]
    delay = np.where(here, setup[:, None, :], np.where(started, float(obs.switch_cost), 0.0)[:, None, :])
    sp = speed[None, :, None]

    def steps(rem):  # steps to finish on each node: set-up owed + batches at the node's speed ([E, M, K])
        return delay + np.ceil(demand(rem, (E, K))[:, None, :] / sp)

    def slack(rem):
        return np.clip((tau - steps(rem)) / scale, -3.0, 3.0)

    fin = np.clip(steps(obs.pred_remaining) / scale, 0.0, 3.0)
    out = np.stack(
        [
            np.broadcast_to(sp / speed.max(), (E, M, K)),
            here.astype(np.float64),
            np.clip(delay / 10.0, 0.0, 3.0),
            slack(obs.pred_remaining),
            slack(obs.pred_remaining_lo),
            slack(obs.pred_remaining_hi),
            fin,
        ],
        axis=-1,
    )
    return (out * present[:, None, :, None]).astype(np.float32)


def node_order(speed) -> np.ndarray:
    """The order the nodes choose in: fastest first, ties by index -> [M] node indices."""
    return np.argsort(-np.asarray(speed, dtype=np.int64), kind="stable")


def chosen_ranks(picks: torch.Tensor, n_slots: int) -> tuple[torch.Tensor, torch.Tensor]:
    """Choices ``picks [E, M]`` (0..K, K = idle) in priority order -> (chosen [E, K] bool, rank [E, K] float: the
    slot's position among the picks / M, 1 where not chosen)."""
    E, M = picks.shape
    pos = torch.arange(M, device=picks.device, dtype=torch.float32).expand(E, M) / M
    rank = torch.ones(E, n_slots + 1, device=picks.device).scatter(1, picks, pos)[:, :n_slots]
    chosen = torch.zeros(E, n_slots + 1, dtype=torch.bool, device=picks.device).scatter(1, picks, True)[:, :n_slots]
    return chosen, torch.where(chosen, rank, torch.ones_like(rank))


def dynamic_channels(pairs: torch.Tensor, chosen: torch.Tensor, rank: torch.Tensor) -> torch.Tensor:
    """``pairs [E, M, K, N_PAIR]`` + the chosen set's channels -> [E, M, K, N_PAIR + N_DYNAMIC]."""
    here = pairs[..., 1]  # ran on this node at t-1
    ran = here.sum(dim=1, keepdim=True).clamp(max=1.0)  # [E, 1, K] ran somewhere at t-1
    elsewhere = ran - here
    held = (here * chosen[:, None, :]).sum(dim=2, keepdim=True)  # [E, M, 1] chosen tasks that ran on this node
    by_other = (held - here * chosen[:, None, :]).clamp(0.0, 1.0)
    E, M, K, _ = pairs.shape
    return torch.cat([pairs, rank[:, None, :, None].expand(E, M, K, 1), elsewhere[..., None], by_other[..., None]], -1)


def allowed(chosen: torch.Tensor, node_actions: torch.Tensor, order: torch.Tensor) -> torch.Tensor:
    """Allowed choices of each node, teacher-forced on ``node_actions [E, M]`` (per node index, 0..K) taken in
    ``order [M]`` -> [E, M, K+1] bool by node index (module docstring)."""
    E, M = node_actions.shape
    K = chosen.shape[1]
    allow = torch.zeros((E, M, K + 1), dtype=torch.bool, device=chosen.device)
    left = chosen.clone()
    for i, n in enumerate(order.tolist()):
        n_left = left.sum(dim=1)
        allow[:, n, :K] = left
        allow[:, n, K] = n_left < (M - i)  # idle while more nodes than chosen tasks are left
        a = node_actions[:, n]
        left = left & ~(torch.arange(K, device=chosen.device)[None, :] == a[:, None])
    return allow


def log_prob(
    logits: torch.Tensor, chosen: torch.Tensor, node_actions: torch.Tensor, order: torch.Tensor
) -> torch.Tensor:
    """log π(node_actions | chosen) [E] from per-node logits ``[E, M, K+1]`` (module docstring)."""
    allow = allowed(chosen, node_actions, order)
    masked = logits.masked_fill(~allow, torch.finfo(logits.dtype).min)
    return torch.log_softmax(masked, dim=-1).gather(2, node_actions[..., None]).squeeze(-1).sum(dim=1)


def decode(
    logits: torch.Tensor,
    chosen: torch.Tensor,
    order: torch.Tensor,
    deterministic: bool = True,
    generator: torch.Generator | None = None,
) -> torch.Tensor:
    """Nodes in ``order`` each take a chosen task not yet placed or idle -> node actions [E, M] (0..K) by node index;
    argmax per node (``deterministic``) or a draw. Every chosen task gets exactly one node."""
    E, M, K1 = logits.shape
    K = K1 - 1
    out = torch.full((E, M), K, dtype=torch.long, device=logits.device)
    left = chosen.clone()
    rows = torch.arange(E, device=logits.device)
    neg = torch.finfo(logits.dtype).min
    for i, n in enumerate(order.tolist()):
        allow = torch.cat([left, (left.sum(dim=1) < (M - i))[:, None]], dim=1)
        lg = logits[:, n].masked_fill(~allow, neg)
        if deterministic:
            a = lg.argmax(dim=-1)
        else:
            p = torch.softmax(lg, dim=-1)
            a = (
                torch.multinomial(p.to(generator.device) if generator is not None else p, 1, generator=generator)
                .squeeze(-1)
                .to(logits.device)
            )
        out[:, n] = a
        left[rows, torch.clamp(a, max=K - 1)] &= a == K  # a placed task leaves the pool
    return out


def placed_choices(env_actions: np.ndarray, n_slots: int) -> torch.Tensor:
    """Placed env actions [E, M] (slot per node, IDLE = -1) -> node actions [E, M] long in 0..K (K = idle)."""
    a = np.asarray(env_actions).astype(np.int64).copy()
    a[a < 0] = n_slots
    return torch.as_tensor(a)
