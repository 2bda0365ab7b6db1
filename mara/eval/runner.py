"""Evaluation runner: methods × task sets × loads × roots × episodes on identical episodes.

All (task set, load, root, episode) combinations are stacked into one ``EpisodeBatch`` and every
policy runs over the whole stack in one batched simulator, so each method sees exactly the same
episodes and curves. Bounds (Oracle, Clairvoyant) are computed from the same stack, each by the function its
method config names (``compute``, mara/bounds/episodes.py).
"""

from __future__ import annotations

import time
from dataclasses import asdict
from typing import Mapping

import numpy as np

from mara.bounds.episodes import chosen_tasks, clairvoyant_results
from mara.core.config import (
    ConfigError,
    build_allocators,
    check_predictor_allowed,
    load_method_cfg,
)
from mara.core.registry import import_object
from mara.curves.bank import BankError, CurveBank
from mara.eval.policy_fit import check_policy_fit

# check_number, node_options, load_bank_from_cfg are re-exported here for preflight, train and live
from mara.eval.settings import (  # noqa: F401
    EvalProtocol,
    SimSettings,
    Workload,
    check_number,
    load_bank_from_cfg,
    node_options,
)
from mara.predictors.factory import predictor_from
from mara.sim.env import BatchedEnv
from mara.sim.workload import (
    EpisodeBatch,
    check_family_params_cover,
    generate_episodes,
    generate_stress_episodes,
)
from mara.traces.paper_setting import replay_episodes

ROW_KEYS = ("n_tasks", "succeeded", "success_rate", "utilization", "queue_full", "waiting", "ready", "turned_away")


def family_table(workload: Workload, bank: CurveBank, families) -> dict:
    """The ε/budget table: the bank's own calibrated one unless ``family_params`` names a table."""
    try:
        return check_family_params_cover(bank, workload.family_table, families, where="family_params")
    except BankError:
        raise
    except ValueError as exc:
        raise ConfigError(str(exc)) from None


def build_episodes(workload: Workload, bank: CurveBank, protocol: EvalProtocol, steps: int) -> EpisodeBatch:
    """Stack every (task set, load, root) group of ``protocol`` into one EpisodeBatch (``steps``: arrival window T)."""
    if protocol.scenario == "stress":
        stress = asdict(workload.stress)  # StressSettings' fields are the generator's arguments
        batches = [generate_stress_episodes(bank, root, protocol.episodes, **stress) for root in protocol.roots]
        return EpisodeBatch.concat(batches)
    task_sets = workload.task_sets
    unknown = [t for t in protocol.task_sets if t not in task_sets]
    if unknown:
        raise ConfigError(f"unknown task set(s) {', '.join(unknown)}; configured: {', '.join(task_sets)}")
    needed = sorted({f for t in protocol.task_sets for f in task_sets[t].all_families})
    table = family_table(workload, bank, needed)
    batches = [
        generate_episodes(bank, table, task_sets[ts], float(load), root, protocol.episodes, int(steps))
        for ts in protocol.task_sets
        for load in protocol.loads
        for root in protocol.roots
    ]
    return EpisodeBatch.concat(batches)


def _rows_from_metrics(method: str, ep: EpisodeBatch, metrics: dict, train_seed=None, extra=None) -> list[dict]:
    rows = []
    for e in range(ep.E):
        row = {
            "method": method,
            "task_set": ep.task_set[e],
            "load": float(ep.load[e]),
            "root": int(ep.root[e]),
            "train_seed": train_seed,
            "episode": int(ep.episode[e]),
        }
        for k in ROW_KEYS:
            v = metrics.get(k)
            if v is None:
                row[k] = None
            else:
                x = v[e].item() if hasattr(v[e], "item") else v[e]
                row[k] = None if isinstance(x, float) and not np.isfinite(x) else x
        for k in ("switches", "setup_steps"):  # diagnostics only on heterogeneous nodes / with switch costs
            if k in metrics:
                row[k] = int(metrics[k][e])
        if extra:
            for k, v in extra.items():
                row[k] = v[e] if isinstance(v, (list, np.ndarray)) else v
        rows.append(row)
    return rows


def run_policy(allocator, ep: EpisodeBatch, bank: CurveBank, sim: SimSettings, predictor=None, progress=None) -> dict:
    """Per-episode metrics of one allocator over all episodes (one batched simulator, or with ``sim.engine=replay``
    the trace simulator, one episode at a time).

    ``progress(step, limit)``, if given, is called after every simulator step (it throttles itself)."""
    if sim.engine == "replay":
        opts = sim.node_options()
        return replay_episodes(
            allocator,
            ep,
            bank,
            sim.nodes,
            sim.max_active,
            sim.obs_every,
            predictor,
            sim.queue_capacity,
            opts["node_speed"],
            opts["switch_cost"],
            progress=progress,
        )[2]
    env = BatchedEnv(
        ep,
        bank,
        sim.nodes,
        sim.max_active,
        sim.obs_every,
        predictor=predictor,
        queue_capacity=sim.queue_capacity,
        **sim.node_options(),
    )
    obs = env.reset()
    allocator.reset(ep.E)
    limit = ep.horizon + ep.n_steps + 2
    for step in range(limit):
        if env.done.all():
            break
        obs, _, _, _ = env.step(allocator.act(obs))
        if progress is not None:
            progress(step + 1, limit)
    return env.metrics()


def run_bound(name: str, mcfg: Mapping, ep: EpisodeBatch, sim: SimSettings, progress=None) -> tuple[dict, dict]:
    """Per-episode successes of a bound, by the function its config names (``compute``); returns (metrics, extra
    row fields). ``progress(fraction)`` per episode."""
    if not mcfg.get("compute"):
        raise ConfigError(f"method {name}: a bound names the function that computes it (compute: module.function)")
    succ, extra = import_object(str(mcfg.compute))(mcfg, ep, sim, progress)
    n = ep.n_tasks
    metrics = {"n_tasks": n, "succeeded": succ, "success_rate": np.where(n > 0, succ / np.maximum(n, 1), np.nan)}
    return metrics, extra


def method_outcome_note(exc: BaseException) -> tuple[str, str]:
    """(status, one-line reason) for a method that could not be evaluated: ``skipped`` when an (optional)
    dependency cannot be imported, ``failed`` for any other error."""
    status = "skipped" if isinstance(exc, ImportError) else "failed"
    msg = " ".join(str(exc).split()) or type(exc).__name__
    if status == "failed" and not isinstance(exc, ConfigError):
        msg = f"{type(exc).__name__}: {msg}"
    return status, msg


def evaluate_one(
    name: str,
    mcfg: Mapping,
    ep: EpisodeBatch,
    bank: CurveBank,
    sim: SimSettings,
    predictors: Mapping,
    built: dict,
    progress=None,
) -> list[dict]:
    """Rows of one method on every episode (one allocator per training seed for learned policies).

    ``predictors``: the run's configured predictors (name → config); ``built``: those built so far in this run."""
    if mcfg.kind == "bound":
        metrics, extra = run_bound(name, mcfg, ep, sim, progress=progress)
        return _rows_from_metrics(name, ep, metrics, extra=extra)
    check_predictor_allowed(mcfg)
    predictor = predictor_from(mcfg.get("predictor"), bank.path, configured=predictors, built=built)
    rows = []
    allocators = build_allocators(mcfg)
    check_policy_fit(mcfg, [a for _, a in allocators], sim)
    solve_share, solve = 0.0, None
    if (
        mcfg.get("chosen_by") is not None
    ):  # a privileged selection bound: only the Clairvoyant's chosen tasks are served
        if sim.engine == "replay":
            raise ConfigError(f"method {name}: chosen_by (a selection bound) runs on sim.engine=batched only")
        if not all(hasattr(a, "restrict_to") for _, a in allocators):
            raise ConfigError(f"method {name}: chosen_by needs a rule that can be restricted to tasks (SlackRule)")
        solve_share = 0.9  # the solve is nearly all the time
        res = clairvoyant_results(
            name, mcfg.chosen_by, ep, sim, None if progress is None else (lambda f: progress(solve_share * f))
        )
        chosen = chosen_tasks(res, ep.arrival.shape[1])
        for _, alloc in allocators:
            alloc.restrict_to(chosen)
        # the same solve's numbers beside the realised ones: its proven bound and its best (relaxed) schedule
        solve = {
            "clairvoyant_bound": [int(r.upper_bound) for r in res],
            "clairvoyant_found": [int(r.successes) for r in res],
            "optimal": [bool(r.optimal) for r in res],
        }
    for i, (seed, alloc) in enumerate(allocators):
        tick = (
            None
            if progress is None
            else (lambda s, n, i=i: progress(solve_share + (1 - solve_share) * (i + s / n) / len(allocators)))
        )
        rows += _rows_from_metrics(
            name, ep, run_policy(alloc, ep, bank, sim, predictor, progress=tick), train_seed=seed, extra=solve
        )
    return rows


def evaluate_methods(
    methods: list[str],
    ep: EpisodeBatch,
    bank: CurveBank,
    sim: SimSettings,
    overrides: dict,
    predictors: Mapping,
    progress=None,
    log=print,
    on_method_done=None,
    done_rows: dict | None = None,
) -> tuple[list[dict], dict, dict]:
    """Evaluate each named method on the same episodes; returns (rows, timings in seconds, notes).

    ``overrides``: {method: config overrides}; ``predictors``: the run's configured predictors (name → config).
    A method that cannot be evaluated does not stop the others: a missing optional dependency (ImportError)
    marks it ``skipped``, any other error ``failed``: ``notes[method] = {"status", "reason"}`` (one line).
    ``on_method_done(rows, notes, timings)`` is called after every method (the caller writes results then);
    ``done_rows`` ({method: rows}) are reused as they are (a resumed evaluation).
    ``progress(method, fraction)`` is called while a method runs.
    """
    cfgs = [load_method_cfg(m, (overrides or {}).get(m)) for m in methods]  # fail fast on names
    for mcfg in cfgs:  # ... and on a learned policy given the perfect-prediction bound
        check_predictor_allowed(mcfg)
    rows, timings, built, notes = [], {}, {}, {}
    done_rows = done_rows or {}
    for name, mcfg in zip(methods, cfgs):
        if name in done_rows:
            rows += done_rows[name]
            log(f"  {name:<12} (already evaluated in this run folder, kept)")
            continue
        t0 = time.perf_counter()
        tick = None if progress is None else (lambda f, name=name: progress(name, f))
        try:
            rows += evaluate_one(name, mcfg, ep, bank, sim, predictors, built, progress=tick)
        except Exception as exc:  # one method's failure never loses the others' rows
            status, reason = method_outcome_note(exc)
            notes[name] = {"status": status, "reason": reason}
            log(f"  {name:<12} {status}: {reason}")
        else:
            timings[name] = time.perf_counter() - t0
            log(f"  {name:<12} {timings[name]:8.2f} s")
        if on_method_done is not None:
            on_method_done(rows, notes, timings)
    return rows, timings, notes
