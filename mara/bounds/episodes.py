"""The bound methods on a batch of episodes: each ``compute`` function a ``kind: bound`` method names.

``fn(mcfg, ep, sim, progress) -> (successes [E], extra row fields)``: ``mcfg`` the method's config, ``ep`` the
``EpisodeBatch``, ``sim`` the run's simulator settings (``nodes``, ``max_active``, ``hetero``, ``node_options()``),
``progress(fraction)`` called as episodes are done (or None).
"""

from __future__ import annotations

import numpy as np

from mara.bounds.clairvoyant import clairvoyant_batch
from mara.bounds.clairvoyant_k import clairvoyant_k_batch
from mara.bounds.parallel import map_episodes, resolve_workers
from mara.core.config import ConfigError
from mara.sim.nodes import isolated_feasible


def oracle_successes(mcfg, ep, sim, progress=None) -> tuple[np.ndarray, dict]:
    """Independent feasibility (paper §5.1): a task counts if its curve reaches ε within its budget alone; on
    heterogeneous nodes it runs without a break on the fastest node."""
    if not sim.hetero:
        return ep.oracle_successes(), {}
    speed = sim.node_options()["node_speed"]
    return (isolated_feasible(ep.need, ep.budget, speed) & ep.valid).sum(axis=1), {}


def clairvoyant_successes(mcfg, ep, sim, progress=None) -> tuple[np.ndarray, dict]:
    """The Clairvoyant's proven upper bound per episode, with whether it was proven optimal and the solve time; on
    heterogeneous nodes also what the number is (exact, or which relaxation it bounds)."""
    res = clairvoyant_results(str(mcfg.get("name", "Clairvoyant")), mcfg, ep, sim, progress)
    succ = np.array([r.upper_bound for r in res])
    extra = {"optimal": [bool(r.optimal) for r in res], "solve_time_s": [float(r.solve_time_s) for r in res]}
    if sim.hetero:  # what the number is: with a relaxation, "optimal" means the relaxation was solved
        opts = sim.node_options()
        relaxed = []
        if not mcfg.get("admission_limit", True):
            relaxed = ["K relaxed"] + (["speeds as capacity"] if opts["node_speed"] is not None else [])
        relaxed += ["switch costs relaxed"] if opts["switch_cost"] > 0 else []
        extra["bound_kind"] = "bound: " + ", ".join(relaxed) if relaxed else "exact"
    return succ, extra


def clairvoyant_results(name: str, mcfg, ep, sim, progress=None) -> list:
    """The Clairvoyant's solve of every episode (``ClairvoyantResult`` each: bound, best schedule's successes and
    its chosen tasks), with ``mcfg``'s options: ``admission_limit`` (default true), ``time_limit_s``, ``workers``; on
    heterogeneous nodes the speeds exact, switch costs relaxed."""
    limit = float(mcfg.get("time_limit_s", 10.0))
    try:
        workers = resolve_workers(mcfg.get("workers", 1))
    except ValueError as exc:
        raise ConfigError(f"method {name}: {exc}") from None
    with_k = bool(mcfg.get("admission_limit", True))  # exact with the FIFO admission limit K; false: K relaxed
    kwargs = {"n_nodes": sim.nodes, "time_limit_s": limit}
    if with_k:
        kwargs["max_active"] = sim.max_active
    if sim.hetero:  # heterogeneous nodes: speeds exact (with K), switch costs relaxed (a bound when > 0)
        kwargs["node_speed"] = sim.node_options()["node_speed"]
    jobs = [
        (with_k, ep.arrival[e : e + 1], ep.deadline[e : e + 1], ep.need[e : e + 1], ep.n_tasks[e : e + 1], kwargs)
        for e in range(ep.E)
    ]
    return map_episodes(_clairvoyant_one, jobs, workers, progress)  # one episode a job: a long solve still reports


def chosen_tasks(results: list, n_max: int) -> np.ndarray:
    """[E, n_max] bool: the tasks (arrival order) that each episode's Clairvoyant schedule completes."""
    out = np.zeros((len(results), n_max), dtype=bool)
    for e, r in enumerate(results):
        out[e, : len(r.chosen)] = np.asarray(r.chosen, dtype=bool)
    return out


def _clairvoyant_one(with_k: bool, arrival, deadline, need, n_tasks, kwargs: dict):
    """The Clairvoyant bound of one episode (``[1, N]`` arrays): module-level so worker processes can run it."""
    return (clairvoyant_k_batch if with_k else clairvoyant_batch)(arrival, deadline, need, n_tasks, **kwargs)[0]
