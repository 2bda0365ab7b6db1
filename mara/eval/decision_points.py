"""Prediction quality at the simulator's real decision points.

``collect_decision_points`` rolls a policy through a batched simulator and records, before every action, each warm
task that could be served (present, ≥ 4 observations, cap not used up): its observation count, the time left to
its deadline τ, the predictor's median and band (aged like the rule sees them) and the true remaining batches
(need − processed). Unlike the prediction benchmark's queries, τ here includes the time the task already waited.
``decision_point_metrics`` scores the finish decision "p̂ ≤ τ" against "truth ≤ τ" and the slack ranking with
``mara.eval.decision_metrics`` (one record per task and step: a task that stays undecided for many steps counts
many times, as the rule re-decides it every step).
"""

from __future__ import annotations

from dataclasses import replace

import numpy as np

from mara.allocators.slack import band_quantile
from mara.core.config import build_allocators, load_method_cfg
from mara.eval.decision_metrics import decision_metrics
from mara.eval.runner import build_episodes
from mara.eval.settings import DecisionPointSettings, EvaluationSettings, bank_at
from mara.predictors.baselines.truth import true_remaining_batches
from mara.predictors.factory import predictor_from
from mara.sim.env import WARMUP_OBS, BatchedEnv


def collect_decision_points(env, allocator, quantiles=(), max_steps: int | None = None) -> dict:
    """{n_obs, tau, truth, median, q10, q90, q<x>...} [D] over every (episode, step, warm servable task)."""

    obs = env.reset()
    allocator.reset(env.ep.E)
    keys = ["n_obs", "tau", "truth", "median", "q10", "q90", *[f"q{x:g}" for x in quantiles]]
    acc = {k: [] for k in keys}
    limit = max_steps or (env.ep.horizon + env.ep.n_steps + 2)
    for _ in range(limit):
        if env.done.all():
            break
        m = obs.present & (obs.n_obs >= WARMUP_OBS) & (obs.cap_remaining > 0)
        if m.any():
            med, lo, hi = obs.pred_remaining[m], obs.pred_remaining_lo[m], obs.pred_remaining_hi[m]
            acc["n_obs"].append(obs.n_obs[m])
            acc["tau"].append(obs.remaining_time[m].astype(np.float64))
            acc["truth"].append(true_remaining_batches(env.slot_need[m], env.slot_s[m], obs.cap_remaining[m]))
            acc["median"].append(med)
            acc["q10"].append(lo)
            acc["q90"].append(hi)
            for x in quantiles:
                acc[f"q{x:g}"].append(band_quantile(lo, med, hi, float(x)))
        obs = env.step(allocator.act(obs))[0]
    return {k: np.concatenate(v) if v else np.zeros(0) for k, v in acc.items()}


def decision_point_metrics(points: dict, estimates=None) -> dict:
    """{estimate: decision_metrics} at the recorded decision points (s0 = 0, budget = τ, first = truth)."""
    names = estimates or [k for k in points if k not in ("n_obs", "tau", "truth")]
    zero = np.zeros_like(points["tau"])
    return {
        name: decision_metrics(zero, points["tau"], points["truth"], points["truth"], points["n_obs"], points[name])
        for name in names
        if len(points["tau"])
    }


def decision_points(points: DecisionPointSettings, run: EvaluationSettings) -> dict:
    """``experiment=prediction`` part: for each ``points.policies`` entry (label → method), roll the method on the
    evaluation protocol's episodes at ``points.loads`` (roots ``eval.roots``) and score its predictor at its own
    decision points; returns {label: {estimate: metrics}, "_meta": {...}}."""
    sim = run.sim
    bank = bank_at(run.bank_path)
    protocol = replace(run.protocol, loads=list(points.loads), scenario="random")
    ep = build_episodes(run.workload, bank, protocol, sim.steps)
    out, cache = {}, {}
    for label, method in points.policies.items():
        mcfg = load_method_cfg(method)
        pred = predictor_from(mcfg.get("predictor"), bank.path, configured=run.predictors, built=cache)
        ((_, alloc),) = build_allocators(mcfg)
        env = BatchedEnv(ep, bank, sim.nodes, sim.max_active, sim.obs_every, predictor=pred)
        out[label] = decision_point_metrics(
            collect_decision_points(env, alloc, points.quantiles if label == "FM" else ())
        )
    out["_meta"] = {
        "loads": protocol.loads,
        "roots": protocol.roots,
        "episodes": protocol.episodes,
        "task_sets": protocol.task_sets,
        "n_episodes": int(ep.E),
        "policies": dict(points.policies),
    }
    return out
