"""Node placement for heterogeneous nodes and switch costs: which node each chosen task gets.

The rules (FIFO, EDF, LARA, LARA-FM, Slack-*) decide *which* tasks run this step and in which priority
order; on the paper's identical nodes with free preemption the node a task lands on does not matter and
the rules' actions are returned untouched (``place`` is the identity, bit for bit). With node speeds or a
switch cost (``obs.hetero``) the tasks are placed by ``assign_nodes``, a pure function:

Greedy in priority order, the highest-ranked task first, each task takes the free node on which it is
expected to finish soonest::

    finish(n) = delay(n) + ceil(remaining / speed[n])
    delay(n)  = setup_left            if n is the node it ran on at t-1 (it keeps its run going)
              = switch_cost           if it was served before (a move or a resume starts a new run)
              = 0                     for a task's first start (free)

``remaining`` is the rule's own estimate of the batches still needed (the predictor's for LARA/Slack, the
observable generation cap for FIFO/EDF); ``None`` = unknown, treated as very large, so speed dominates.
A chosen task that ran on a node at t−1 holds that node: no other task may take it (a higher-ranked task
never displaces a running one, which would make both pay the switch cost; a least-slack order reshuffles
ranks every step). Ties go to the node it ran on (no switch), then to the *slower* node (best fit: a fast
node stays free for a task that gains from it), then to the lower index. Consequences: with switch costs a
running task stays on its node unless the expected gain from a faster free node exceeds the set-up it pays
(sticky assignment); a new task or a task with a long way to go goes to the fastest free node; with fewer
tasks than nodes the slowest nodes idle. The claims hold without switch costs too: on validation roots
100–101 (docs/allocators.md) that beat handing the fastest nodes to the highest ranks every step (LARA
65.3 → 69.8 %, Slack-WLS 73.3 → 73.9 %, FIFO/EDF unchanged) — a task that keeps a fast node finishes, and
frees its admission slot, sooner.

Displacement (``displace: true`` on a rule; ``displace_running``, a pure function applied after the greedy pass):
the greedy pass never takes a node from a running task, so a task that can finish in time only on a faster node
stays on a slow one while that node's task has time to spare. After the greedy pass, in priority order, a
*tight* task ``a`` (expected to miss its deadline on its node ``n_a``: ``finish_a(n_a) > remaining_time_a``)
takes a faster node ``f`` from the task ``b`` running there (it ran on ``f`` at t−1) when both still finish in
time after the swap::

    finish_a(f) <= remaining_time_a        and        switch_cost + ceil(remaining_b / speed[n_a]) <= remaining_time_b

``b`` moves to ``n_a`` (paying the switch cost). Among several such ``f`` the one leaving ``b`` the most spare
steps wins (ties: lower index); a node takes part in at most one swap per step. Only a task that would otherwise
miss its deadline triggers a swap, and only a task that keeps its deadline is displaced, so a least-slack order
reshuffling its ranks does not make tasks trade nodes back and forth (a placement search that also moved tasks to
finish earlier nearly tripled the switches and lost about a point). On equal speeds nothing is faster: the move
never fires, so identical nodes keep their placement bit for bit.
"""

from __future__ import annotations

import numpy as np

from mara.sim.env import IDLE, Observation

_UNKNOWN = 10**9  # a remaining demand nobody estimated: longer than any episode


def demand(remaining, shape) -> np.ndarray:
    """Integer remaining batches [E, K] from an estimate (None, NaN or inf: unknown, i.e. ``_UNKNOWN``)."""
    if remaining is None:
        return np.full(shape, _UNKNOWN, np.int64)
    r = np.nan_to_num(np.ceil(np.asarray(remaining, dtype=np.float64)), nan=_UNKNOWN, posinf=_UNKNOWN)
    return np.clip(r, 0, _UNKNOWN).astype(np.int64)


def assign_nodes(
    picks, node_speed, switch_cost: int = 0, last_node=None, started=None, setup_left=None, remaining=None
) -> np.ndarray:
    """Place the chosen tasks on nodes (module docstring).

    picks [E, M] slot indices in priority order (best first; ``IDLE`` entries are skipped, wherever they are);
    node_speed [M] positive ints; last_node [E, K] node of each slot at t-1 (-1 none); started [E, K] bool;
    setup_left [E, K] int; remaining [E, K] estimated batches still needed (None: unknown).
    Returns actions [E, M]: per node the slot it serves, or IDLE. Every picked task gets exactly one node.
    """
    picks = np.asarray(picks, dtype=np.int64)
    E, M = picks.shape
    speed = np.asarray(node_speed, dtype=np.int64).reshape(-1)
    if speed.shape != (M,):
        raise ValueError(f"node_speed must have {M} entries, got {speed.shape}")
    K = 1 + max(int(picks.max(initial=-1)), 0)
    if last_node is not None:
        K = np.asarray(last_node).shape[1]
    last = np.full((E, K), -1, np.int64) if last_node is None else np.asarray(last_node, dtype=np.int64)
    st = np.zeros((E, K), bool) if started is None else np.asarray(started, dtype=bool)
    setup = np.zeros((E, K), np.int64) if setup_left is None else np.asarray(setup_left, dtype=np.int64)
    rem = demand(remaining, (E, K))
    rows = np.arange(E)
    nodes = np.arange(M)
    out = np.full((E, M), IDLE, dtype=np.int64)
    taken = np.zeros((E, M), dtype=bool)
    speed_rank = np.argsort(np.argsort(speed, kind="stable"), kind="stable")  # 0 = slowest (ties by index)
    # a chosen task that ran on a node at t-1 holds a claim on it: no other task may take that node
    kk_all = np.maximum(picks, 0)
    ln_all = np.where(picks >= 0, last[rows[:, None], kk_all], -1)  # [E, M] (by rank) node each pick ran on
    owner = np.full((E, M + 1), -1, dtype=np.int64)  # per node the rank holding it (last column: no node)
    owner[rows[:, None], np.where(ln_all >= 0, ln_all, M)] = np.arange(M)[None, :]
    owner = owner[:, :M]
    big = np.iinfo(np.int64).max
    for r in range(M):
        k = picks[:, r]
        ok = k >= 0
        if not ok.any():
            continue
        kk = kk_all[:, r]
        ln = ln_all[:, r]  # [E]
        on_last = nodes[None, :] == ln[:, None]  # [E, M]
        delay = np.where(on_last, setup[rows, kk][:, None], np.where(st[rows, kk], int(switch_cost), 0)[:, None])
        finish = delay + -(-rem[rows, kk][:, None] // speed[None, :])  # [E, M]
        key = ((finish * 2 + ~on_last) * M + speed_rank[None, :]) * M + nodes[None, :]
        key = np.where(taken | ((owner >= 0) & (owner != r)), big, key)
        n = np.argmin(key, axis=1)
        er = np.flatnonzero(ok)
        out[er, n[er]] = k[er]
        taken[er, n[er]] = True
        moved = er[(ln[er] >= 0) & (n[er] != ln[er])]  # it left its node: the claim is released
        owner[moved, ln[moved]] = -1
    return out


def displace_running(
    actions,
    picks,
    node_speed,
    switch_cost: int,
    last_node,
    started,
    setup_left,
    remaining,
    remaining_time,
    remaining_displaced=None,
    margin: int = 0,
) -> np.ndarray:
    """The displacement move on a greedy placement (module docstring, "Displacement"): a tight task takes a faster
    node from a running task that can still finish on the tight task's node; returns new actions [E, M].

    actions [E, M] from ``assign_nodes``; picks [E, M] the same priority order; last_node, started, setup_left,
    remaining (estimate, None = unknown) and remaining_time [E, K]. ``remaining_displaced`` [E, K]: the estimate the
    displaced task's test reads (default ``remaining``; a band's upper end makes the move cautious), which must leave
    it ``margin`` steps to spare. On equal speeds nothing changes.
    """
    out = np.array(actions, dtype=np.int64, copy=True)
    picks = np.asarray(picks, dtype=np.int64)
    E, M = out.shape
    speed = np.asarray(node_speed, dtype=np.int64).reshape(-1)
    if np.all(speed == speed[0]):
        return out
    last = np.asarray(last_node, dtype=np.int64)
    K = last.shape[1]
    st = np.asarray(started, dtype=bool)
    setup = np.asarray(setup_left, dtype=np.int64)
    rem = demand(remaining, (E, K))
    rem_b = rem if remaining_displaced is None else demand(remaining_displaced, (E, K))
    tau = np.asarray(remaining_time, dtype=np.int64)
    rows = np.arange(E)
    c = int(switch_cost)

    def finish(k, n):  # [E] expected finishing step of slot k [E] on node n [E] (the placement's estimate)
        kk = np.maximum(k, 0)
        delay = np.where(last[rows, kk] == n, setup[rows, kk], np.where(st[rows, kk], c, 0))
        return delay + -(-rem[rows, kk] // speed[np.maximum(n, 0)])

    fixed = np.zeros((E, M), dtype=bool)  # nodes already part of a swap this step
    for r in range(M):
        a = picks[:, r]
        na = np.argmax(out == np.maximum(a, 0)[:, None], axis=1)  # node slot a was placed on
        na_ok = (a >= 0) & (out[rows, na] == a)
        tight = na_ok & ~fixed[rows, na] & (finish(a, na) > tau[rows, np.maximum(a, 0)])
        if not tight.any():
            continue
        best_node = np.full(E, -1, dtype=np.int64)
        best_spare = np.full(E, -1, dtype=np.int64)
        for f in range(M):
            b = out[:, f]
            bb = np.maximum(b, 0)
            fv = np.full(E, f)
            ok = tight & (b >= 0) & (b != a) & ~fixed[:, f] & (speed[f] > speed[na]) & (last[rows, bb] == f)
            ok &= finish(a, fv) <= tau[rows, np.maximum(a, 0)]  # the tight task finishes there
            spare = tau[rows, bb] - (c + -(-rem_b[rows, bb] // speed[na]))  # the running task, moved to a's node
            ok &= spare >= margin
            better = ok & (spare > best_spare)
            best_node = np.where(better, f, best_node)
            best_spare = np.where(better, spare, best_spare)
        er = np.flatnonzero(best_node >= 0)
        if len(er):
            f, n = best_node[er], na[er]
            b = out[er, f]
            out[er, f] = a[er]
            out[er, n] = b
            fixed[er, f] = fixed[er, n] = True
    return out


def place(
    obs: Observation,
    picks: np.ndarray,
    remaining=None,
    displace: bool = False,
    remaining_displaced=None,
    margin: int = 0,
) -> np.ndarray:
    """A rule's actions on the observation's nodes: unchanged on identical nodes with free preemption, else
    ``assign_nodes`` with the observation's node speeds, switch cost and per-slot history, then (``displace``)
    the displacement move ``displace_running`` with the tasks' remaining time."""
    if not getattr(obs, "hetero", False):  # duck-typed observations (tests) are identical-node ones
        return picks
    out = assign_nodes(picks, obs.node_speed, obs.switch_cost, obs.last_node, obs.started, obs.setup_left, remaining)
    if displace:
        out = displace_running(
            out,
            picks,
            obs.node_speed,
            obs.switch_cost,
            obs.last_node,
            obs.started,
            obs.setup_left,
            remaining,
            obs.remaining_time,
            remaining_displaced,
            margin,
        )
    return out


def place_policy(obs: Observation, picks: np.ndarray, placement: str = "greedy") -> np.ndarray:
    """A learned policy's ordered picks [E, M] (its priority order, IDLE anywhere) placed as the least-slack rule
    places its own, with the median remaining estimate ``obs.pred_remaining`` as the demand: the identity on
    identical nodes with free preemption (old policies act unchanged). A deterministic function of the observation
    and the picks, so the policy's log-probability of the picks is that of the placed action. ``placement``
    ``displace``: then the displacement move as Slack-QR-displace makes it (the displaced task judged at the band's
    upper end, no margin)."""
    if not getattr(obs, "hetero", False):
        return picks
    if placement == "displace":
        return place(obs, picks, obs.pred_remaining, displace=True, remaining_displaced=obs.pred_remaining_hi)
    return place(obs, picks, obs.pred_remaining)
