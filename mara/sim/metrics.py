"""The batched simulator's per-episode metrics, from the tasks' outcomes and the step counts: one function for every
engine that plays the paper's episodes (``BatchedEnv.metrics``, the trace replay of the paper's setting).
"""

from __future__ import annotations

import numpy as np

from mara.sim.nodes import isolated_feasible
from mara.sim.observation import TaskStatus
from mara.sim.workload import EpisodeBatch


def episode_metrics(
    ep: EpisodeBatch, status, ready_time, acc: dict, n_nodes: int, node_speed, switch_cost: int
) -> dict:
    """Per-episode outcome and operational diagnostics [E] (docs/architecture.md) from every task's ``TaskStatus`` and
    warm-up step (``status`` / ``ready_time`` [E, N], -1: never warm) and the per-episode counts ``acc`` (steps, busy
    node-steps, steps with K tasks active, summed queue length; set-up steps and switches on unequal nodes)."""
    turned = (status == TaskStatus.TURNED_AWAY).sum(axis=1)
    n = ep.n_tasks - turned
    succeeded = (status == TaskStatus.SUCCEEDED).sum(axis=1)
    steps = np.maximum(acc["steps"], 1)
    reached = (ready_time >= 0) & ep.valid
    n_ready = reached.sum(axis=1)
    ready_sum = np.where(reached, ready_time - ep.arrival, 0).sum(axis=1)
    hetero = node_speed is not None or switch_cost > 0
    feasible = isolated_feasible(ep.need, ep.budget, node_speed) if hetero else ep.need <= ep.budget
    out = {
        "n_tasks": n,
        "succeeded": succeeded,
        "failed": (status == TaskStatus.FAILED).sum(axis=1),
        "success_rate": np.where(n > 0, succeeded / np.maximum(n, 1), np.nan),
        "utilization": acc["busy"] / (n_nodes * steps),
        "queue_full": acc["full_steps"] / steps,
        "waiting": acc["queue_sum"] / steps,
        "ready": np.where(n_ready > 0, ready_sum / np.maximum(n_ready, 1), np.nan),
        "steps": acc["steps"].copy(),
        "turned_away": turned,
        "oracle": ((feasible & ep.valid) & (status != TaskStatus.TURNED_AWAY)).sum(axis=1),
    }
    if hetero:
        out.update(setup_steps=acc["setup_steps"].copy(), switches=acc["switches"].copy())
    return out
