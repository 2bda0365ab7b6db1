"""``trace.jobs=target_loss``: trace jobs that stop at a target loss, under schedulers told different counts.

Each method's config says which count its trace scheduler plans on (``trace_count``):
  * ``declared``: the user's declared count (mara/traces/target_loss.py). The job runs until it reaches its target
    (it stops and succeeds) or until its declared count is spent — then it stops short of its target and misses,
    as a training job told to run that many iterations does. Reaching the target is an event of the simulator, as a
    job's end is, so its GPUs go back at once.
  * ``true``: the true count (the scheduler as its paper runs it).
  * ``none``: the scheduler reads no count for its decisions (EDF: deadline order); the job runs to its target.
  * ``predicted``: the remaining iterations a predictor (``trace_predictor``) estimates from the job's loss prefix, at
    a band level (``trace_band``: lo | median | hi), and before it has ``min_obs`` observations the count by which a
    share ``trace_prior_quantile`` of the model's past runs reach the target. The job runs to its target; the
    simulator, not the plan, says when it gets there (an estimate that runs short is re-planned, never a success).
The true count is never in the view of a ``declared`` scheduler: its ``iter_left`` is the declared count less the
iterations done.
"""

from __future__ import annotations

import copy
from pathlib import Path

import numpy as np
from omegaconf import DictConfig

from mara.core.config import ConfigError, load_method_cfg, plain_config
from mara.core.registry import trace_predictors
from mara.curves.bank import default_bank_path, load_bank
from mara.predictors.estimates import Estimates
from mara.predictors.factory import predictor_from
from mara.traces.replay import NEVER, PENDING, RUNNING, JobState, replay
from mara.traces.report import write_trace_results
from mara.traces.run import build_scheduler, check_trace_run, job_rows, trace_protocol, window_record
from mara.traces.schema import SIZE_CLASSES, size_class, window_jobs
from mara.traces.target_loss import MODEL_FAMILY, declared_batches, target_loss_jobs
from mara.traces.throughput import LEVELS, job_speeds

COUNTS = ("declared", "true", "none", "predicted")
BANDS = {"lo": 0, "median": 1, "hi": 2}


def method_counts(cfg: DictConfig) -> dict[str, str]:
    """``{method: trace_count}`` of ``methods``; a method that does not say which count it plans on is refused."""
    out = {}
    over = plain_config(cfg.get("method_overrides")) or {}
    for m in cfg.get("methods") or []:
        mc = load_method_cfg(m, over.get(m))
        c = mc.get("trace_count")
        if c not in COUNTS:
            raise ConfigError(
                f"method {m!r} has no trace_count ({' | '.join(COUNTS)}): it cannot run target-loss "
                f"jobs (trace.jobs=target_loss)"
            )
        if c == "predicted":
            if mc.get("trace_band") not in BANDS:
                raise ConfigError(
                    f"method {m!r}: trace_band must be one of {', '.join(BANDS)}, got {mc.get('trace_band')!r}"
                )
            pq_ = mc.get("trace_prior_quantile")
            if isinstance(pq_, bool) or not isinstance(pq_, (int, float)) or not 0 < pq_ <= 1:
                raise ConfigError(f"method {m!r}: trace_prior_quantile must be a number in (0, 1], got {pq_!r}")
            if mc.get("trace_predictor") not in trace_predictors():
                raise ConfigError(
                    f"method {m!r}: trace_predictor must be one of {', '.join(trace_predictors())} (the kinds "
                    f"registered with traces: true), got {mc.get('trace_predictor')!r}"
                )
        out[m] = c
    return out


def check_target_loss_run(cfg: DictConfig, trace) -> dict[str, str]:
    """What a target-loss run needs beyond a trace run's checks: an elasticflow-schema trace with mapped models."""
    if trace.schema != "elasticflow":
        raise ConfigError(
            f"trace.jobs=target_loss needs the elasticflow schema (model, num_iteration): {trace.path} "
            f"is {trace.schema}"
        )
    unknown = sorted(set(map(str, trace.model)) - set(MODEL_FAMILY))
    if unknown:
        raise ConfigError(
            f"trace.jobs=target_loss: model(s) {', '.join(unknown)} have no curve family "
            f"(known: {', '.join(MODEL_FAMILY)})"
        )
    q = (plain_config(cfg.get("trace")) or {}).get("declare_quantile", 0.9)
    if isinstance(q, bool) or not isinstance(q, (int, float)) or not 0 < q <= 1:
        raise ConfigError(f"trace.declare_quantile must be a number in (0, 1], got {q!r}")
    e = (plain_config(cfg.get("trace")) or {}).get("estimate_every_s", 0)
    if isinstance(e, bool) or not isinstance(e, (int, float)) or not 0 <= e < float("inf"):
        raise ConfigError(f"trace.estimate_every_s must be a number >= 0, got {e!r}")
    return method_counts(cfg)


class DeclaredCount:
    """A trace scheduler that sees each job's declared count, not its true one (wraps any trace scheduler)."""

    def __init__(self, inner, declared: np.ndarray):
        self.inner, self.declared = inner, np.asarray(declared, dtype=np.float64)
        self.name, self.caps = inner.name, inner.caps

    def reset(self, state: JobState) -> None:
        self.state = state
        self.work = state.iter_left.copy()  # iterations the job will run: to its target or its declared count
        self.view = copy.copy(state)  # shares every array the scheduler writes; its own iter_left
        self.view.iter_left = self.declared.copy()
        self.inner.reset(self.view)

    def decide(self, now: int, arrivals: np.ndarray):
        s = self.state
        self.view.iter_left[:] = self.declared - (self.work - s.iter_left)
        nxt = self.inner.decide(now, arrivals)
        # the next job to reach its target (or spend its count) is an event
        return next_target_event(s, np.flatnonzero((s.status == RUNNING) & (s.gpus > 0)), now, nxt)


class PredictedCount:
    """A trace scheduler that sees each job's remaining iterations as a predictor estimates them from its loss prefix
    (wraps any trace scheduler); the simulator ends a job when it reaches its target."""

    def __init__(self, inner, tl, bank, predictor, band: int, prior: np.ndarray, every_s: float = 0.0):
        self.inner, self.tl, self.bank, self.band = inner, tl, bank, band
        self.estimates = Estimates(predictor)  # each (job, batches seen) asked once
        self.prior = np.asarray(prior, dtype=np.float64)  # count before the prefix says anything
        self.name, self.caps = inner.name, inner.caps
        self.min_obs = self.estimates.min_obs
        # the predictor is asked at most once per ``every_s`` s of trace time (0: at every decision); in between a
        # job's estimate is its last one less the batches it has run since (a job first warm in between: its prior)
        self.every_s, self.asked_at, self.asked = float(every_s), -np.inf, False
        self.last = {}  # job -> (batches seen, remaining batches) of its latest estimate

    def reset(self, state: JobState) -> None:
        self.state = state
        self.work = state.iter_left.copy()
        self.view = copy.copy(state)
        self.view.iter_left = self.prior.copy()
        self.asked_at, self.last = -np.inf, {}  # a replay starts afresh: an episode is replayed under many schedulers
        self.inner.reset(self.view)

    def _estimates(self, jobs: np.ndarray, done: np.ndarray, ask: bool = True) -> np.ndarray:
        """Remaining iterations of ``jobs`` from their prefixes (``done`` iterations each); ``ask``: ask the
        predictor (else run the last estimates down)."""
        tl, bank = self.tl, self.bank
        scale = tl.seen_scale[jobs]
        seen = np.floor(done / scale).astype(np.int64)  # bank batches observed
        est = np.maximum(self.prior[jobs] - done, 1.0)
        warm = np.flatnonzero(seen >= self.min_obs)
        if not ask:  # between two asks: the last estimate, run down by the batches done since
            for i in warm:
                if int(jobs[i]) in self.last:
                    n0, b = self.last[int(jobs[i])]
                    est[i] = max((b - (seen[i] - n0)) * scale[i], 1.0)
            return est
        if not warm.size:
            return est
        j = jobs[warm]
        q, asked = self.estimates.remembered(j, bank, tl.row[j], seen[warm], tl.target[j], tl.family[j])
        self.asked = self.asked or asked
        for i, b in zip(warm, q[:, self.band]):
            self.last[int(jobs[i])] = (int(seen[i]), float(b))
            est[i] = max(float(b) * scale[i], 1.0)
        return est

    def decide(self, now: int, arrivals: np.ndarray):
        s = self.state
        live = np.flatnonzero((s.status == PENDING) | (s.status == RUNNING))
        if live.size:
            self.asked = False
            self.view.iter_left[live] = self._estimates(
                live, self.work[live] - s.iter_left[live], now - self.asked_at >= self.every_s
            )
            if self.asked:
                self.asked_at = now
        nxt = self.inner.decide(now, arrivals)
        live = np.flatnonzero((s.status == PENDING) | (s.status == RUNNING))
        s.finish[live] = NEVER  # the simulator finds the finish when the job reaches its target
        s.end_event[live] = NEVER
        return next_target_event(s, live[s.gpus[live] > 0], now, nxt)


def replay_target_window(
    trace, w, ts, spec, count: str, bank, seed: int, q: float, mc=None, predictor=None, every_s: float = 0.0
):
    """Replay one window of target-loss jobs under one scheduler: (jobs, scored, Replay, wall s, TargetLossJobs);
    ``every_s``: a ``predicted`` count asks its predictor at most once per that many seconds of trace time."""
    import time

    jobs, scored = window_jobs(trace, w, ts.first_jobs)
    tl = target_loss_jobs(jobs.job_id, jobs.model, jobs.iterations, bank, seed, q)
    sched = build_scheduler(spec, ts.overhead)
    work = jobs.iterations.astype(np.float64).copy()
    if count == "declared":
        work = np.minimum(work, tl.declared)
        sched = DeclaredCount(sched, tl.declared)
    elif count == "predicted":
        prior = (
            tl.declared
            / tl.past_batches
            * np.array(
                [declared_batches(bank, f, e, float(mc.trace_prior_quantile)) for f, e in zip(tl.family, tl.target)]
            )
        )
        sched = PredictedCount(sched, tl, bank, predictor, BANDS[mc.trace_band], np.ceil(prior), every_s)
    tput, max_level = job_speeds(jobs, sched.caps, ts.cluster.gpus, rigid=ts.rigid)
    state = JobState(jobs.submit, jobs.deadline, tput, max_level, work, ts.cluster.gpus, slot=ts.slot)
    t0 = time.perf_counter()
    rep = replay(state, sched, size_class(jobs.num_gpu), len(SIZE_CLASSES), time_limit=ts.time_limit_s)
    secs = time.perf_counter() - t0
    if count == "declared":
        rep.met = rep.met & (tl.declared >= tl.true)  # a job stopped at its declared count never reached its target
    return jobs, scored, rep, secs, tl


def run_target_loss(cfg: DictConfig, out: Path, log=print) -> dict:
    """Every method on target-loss jobs of every window; results as a trace run's, plus each job's counts."""
    ts, trace, methods, windows = check_trace_run(cfg)
    counts = check_target_loss_run(cfg, trace)
    seed, q = ts.target_seed, float((plain_config(cfg.get("trace")) or {}).get("declare_quantile", 0.9))
    every_s = float((plain_config(cfg.get("trace")) or {}).get("estimate_every_s", 0))
    bank = load_bank(default_bank_path())
    log(
        f"target-loss jobs of {ts.path}: cluster {ts.cluster.name}, {len(windows)} {ts.split} window(s), methods "
        + ", ".join(f"{m} ({counts[m]} count)" for m, _ in methods)
    )
    rows, timings, windows_info, occupancy = [], {}, [], {}
    over = plain_config(cfg.get("method_overrides")) or {}
    planned_on = {}
    for name, spec in methods:
        timings[name] = 0.0
        mc, predictor = load_method_cfg(name, over.get(name)), None
        if counts[name] == "predicted":
            predictor = predictor_from(str(mc.trace_predictor), bank.path)
            planned_on[name] = {
                "predictor": str(mc.trace_predictor),
                "band": str(mc.trace_band),
                "prior_quantile": float(mc.trace_prior_quantile),
            }
        for w in windows:
            jobs, scored, rep, secs, tl = replay_target_window(
                trace, w, ts, spec, counts[name], bank, seed, q, mc, predictor, every_s
            )
            timings[name] += secs
            new = job_rows(name, w, jobs, scored, rep)
            for r, j in zip(new, np.flatnonzero(scored)):
                r.update(
                    true_iterations=float(tl.true[j]),
                    declared_iterations=float(tl.declared[j]),
                    target_loss=float(tl.target[j]),
                    family=str(tl.family[j]),
                )
            rows.extend(new)
            windows_info.append(window_record(name, w.index, jobs, scored, rep, secs, ts.cluster.gpus))
            if w is windows[0]:
                occupancy[name] = (rep.occupancy_t - rep.occupancy_t[0], rep.occupancy)
            short = float((tl.declared[scored] < tl.true[scored]).mean())
            log(
                f"{name} window {w.index}: met {rep.met[scored].mean():.3f} of {int(scored.sum())} jobs in {secs:.1f} s"
                f" (declared count short of the true one: {short:.3f} of jobs)"
            )
    protocol = {
        **trace_protocol(ts, trace, windows),
        "jobs": "target_loss",
        "target_seed": seed,
        "declare_quantile": q,
        "bank": str(bank.path),
        "counts": counts,
        "estimate_every_s": every_s,
        "predicted": planned_on,
    }
    return write_trace_results(
        rows,
        windows_info,
        occupancy,
        protocol,
        timings,
        out,
        tensorboard=bool((cfg.get("eval") or {}).get("tensorboard", True)),
    )


def next_target_event(s: JobState, run: np.ndarray, now: float, nxt: float | None) -> float | None:
    """The earlier of ``nxt`` and the first time after ``now`` at which a job of ``run`` (indices of jobs holding GPUs)
    finishes its remaining iterations at its current throughput, set-up overhead included."""
    if run.size:
        sp = s.tput[run, LEVELS.searchsorted(s.gpus[run])]
        t = now + s.overhead[run] + np.ceil(np.maximum(s.iter_left[run], 0.0) / sp)
        t = t[t > now]
        if t.size:
            nxt = float(t.min()) if nxt is None else min(nxt, float(t.min()))
    return nxt
