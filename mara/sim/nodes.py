"""The batched simulator's nodes of unequal speed and its switch cost (mara/sim/env.py's docstring): the options'
one-line checks and what a task alone could still do on the fastest node.
"""

from __future__ import annotations

import numpy as np


def _is_whole(v) -> bool:
    """A finite whole number (not a bool, a string, NaN or infinity)."""
    if isinstance(v, bool) or not isinstance(v, (int, float, np.integer, np.floating)):
        return False
    return bool(np.isfinite(v)) and int(v) == v


def check_node_options(node_speed, switch_cost, n_nodes: int, obs_every: int):
    """Validated ``(node_speed [M] int64 or None, switch_cost int)``; None = every node at speed 1.

    One-line ``ValueError`` for a wrong length, a non-integer or non-positive speed, a speed above
    ``obs_every``, or a negative / non-integer switch cost. All-ones speeds normalise to None."""
    if not _is_whole(switch_cost):
        raise ValueError(f"sim.switch_cost must be an integer >= 0, got {switch_cost!r}")
    if switch_cost < 0:
        raise ValueError(f"sim.switch_cost must be >= 0 (steps lost per move or resume), got {switch_cost}")
    if node_speed is None:
        return None, int(switch_cost)
    if isinstance(node_speed, (str, int, float)):
        raise ValueError(f"sim.node_speed must be null or a list of {n_nodes} positive integers, got {node_speed!r}")
    sp = list(node_speed)
    if len(sp) != n_nodes:
        raise ValueError(f"sim.node_speed must have one entry per node (sim.nodes = {n_nodes}), got {len(sp)}")
    for v in sp:
        if not _is_whole(v):
            raise ValueError(
                "sim.node_speed entries must be integers (batches per step; fractional speeds are not "
                f"supported), got {v!r}"
            )
        if v < 1:
            raise ValueError(f"sim.node_speed entries must be >= 1, got {v}")
        if v > obs_every:
            raise ValueError(
                f"sim.node_speed entries must be <= sim.obs_every = {obs_every} (one observation per step), got {v}"
            )
    arr = np.asarray(sp, dtype=np.int64)
    return (None if np.all(arr == 1) else arr), int(switch_cost)


def isolated_feasible(need, budget, node_speed=None) -> np.ndarray:
    """Can each task succeed alone? It runs without a break on the fastest node (its first start is free),
    so it needs ``ceil(need / max speed)`` steps of its budget."""
    smax = 1 if node_speed is None else int(np.max(node_speed))
    need = np.asarray(need, dtype=np.int64)
    return -(-need // smax) <= np.asarray(budget)


def charge_switches(served, started, node, last_node, setup, switch_cost: int) -> tuple[np.ndarray, np.ndarray]:
    """The switch cost of one step (any shape, one entry per slot): a served slot that has run before and is now on
    another node than at the previous step (moved, or resumed after a pause) owes ``switch_cost`` set-up steps again;
    a served slot that owes set-up steps spends this step on one. Updates ``setup`` (steps owed) in place ->
    (switched, in set-up this step)."""
    switch = served & started & (node != last_node)
    setup[switch] = switch_cost
    in_setup = served & (setup > 0)
    setup[in_setup] -= 1
    return switch, in_setup
