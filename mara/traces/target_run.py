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

from mara.core.config import ConfigError
from mara.core.registry import TRACE_BANDS, TRACE_COUNTS, TraceKeys
from mara.core.runlog import log as runlog
from mara.curves.bank import default_bank_path, load_bank, stand_in_note
from mara.predictors.estimates import Estimates
from mara.predictors.factory import predictor_from
from mara.sched.interface import Decision
from mara.traces.replay import PENDING, RUNNING, JobState, replay
from mara.traces.report import earlier_trace_results
from mara.traces.run import (
    TraceTally,
    bound_windows,
    build_scheduler,
    job_rows,
    method_settings,
    reuse,
    trace_protocol,
    trace_windows,
)
from mara.traces.schema import SCHEMAS, SIZE_CLASSES, size_class, window_jobs
from mara.traces.settings import TraceRunSettings
from mara.traces.target_loss import MODEL_FAMILY, declared_batches, target_loss_jobs
from mara.traces.throughput import job_speeds

COUNTS = TRACE_COUNTS
BANDS = {b: i for i, b in enumerate(TRACE_BANDS)}  # column of the predictor's (lo, median, hi) band


def check_target_loss_run(run: TraceRunSettings, trace) -> dict[str, str]:
    """What a target-loss run needs beyond a trace run's checks: an elasticflow-schema trace with mapped models, and
    a method that says which count it plans on (``trace_count``); returns ``{method: trace_count}``."""
    if not SCHEMAS[trace.schema].per_model:
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
    for m in run.methods:
        if m.keys.count is None:
            raise ConfigError(
                f"method {m.name!r} has no trace_count ({' | '.join(COUNTS)}): it cannot run target-loss "
                f"jobs (trace.jobs=target_loss)"
            )
    return {m.name: m.keys.count for m in run.methods}


class DeclaredCount:
    """A trace scheduler that sees each job's declared count, not its true one (wraps any trace scheduler)."""

    def __init__(self, inner, declared: np.ndarray):
        self.inner, self.declared = inner, np.asarray(declared, dtype=np.float64)
        self.name, self.caps = inner.name, inner.caps

    def start(self, state: JobState) -> None:
        self.state = state
        self.work = state.iter_left.copy()  # iterations the job will run: to its target or its declared count
        self.view = copy.copy(state)  # shares every array of the simulator's state but its own iter_left
        self.view.iter_left = self.declared.copy()
        self.inner.start(self.view)

    def decide(self, now: int, arrivals: np.ndarray) -> Decision:
        s = self.state
        self.view.iter_left[:] = self.declared - (self.work - s.iter_left)
        d = self.inner.decide(now, arrivals)
        d.work_events = True  # the next job to reach its target (or spend its count) is an event
        return d


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

    def start(self, state: JobState) -> None:
        self.state = state
        self.work = state.iter_left.copy()
        self.view = copy.copy(state)
        self.view.iter_left = self.prior.copy()
        self.asked_at, self.last = -np.inf, {}  # a replay starts afresh: an episode is replayed under many schedulers
        self.inner.start(self.view)

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

    def decide(self, now: int, arrivals: np.ndarray) -> Decision:
        s = self.state
        live = np.flatnonzero((s.status == PENDING) | (s.status == RUNNING))
        if live.size:
            self.asked = False
            self.view.iter_left[live] = self._estimates(
                live, self.work[live] - s.iter_left[live], now - self.asked_at >= self.every_s
            )
            if self.asked:
                self.asked_at = now
        d = self.inner.decide(now, arrivals)
        d.unplanned = d.work_events = True  # the simulator finds the finish when the job reaches its target
        return d


def replay_target_window(trace, w, ts, keys: TraceKeys, bank, predictor=None, every_s: float = 0.0):
    """Replay one window of target-loss jobs under one method's trace scheduler (``keys``: its trace keys):
    (jobs, scored, Replay, wall s, TargetLossJobs); ``every_s``: a ``predicted`` count asks its predictor at most
    once per that many seconds of trace time."""
    import time

    jobs, scored = window_jobs(trace, w, ts.first_jobs)
    tl = target_loss_jobs(jobs.job_id, jobs.model, jobs.iterations, bank, ts.target_seed, ts.declare_quantile)
    sched, count = build_scheduler(keys.scheduler, ts.overhead), keys.count
    work = jobs.iterations.astype(np.float64).copy()
    if count == "declared":
        work = np.minimum(work, tl.declared)
        sched = DeclaredCount(sched, tl.declared)
    elif count == "predicted":
        prior = (
            tl.declared
            / tl.past_batches
            * np.array([declared_batches(bank, f, e, keys.prior_quantile) for f, e in zip(tl.family, tl.target)])
        )
        sched = PredictedCount(sched, tl, bank, predictor, BANDS[keys.band], np.ceil(prior), every_s)
    tput, max_level = job_speeds(jobs, sched.caps, ts.cluster.gpus, rigid=ts.rigid)
    state = JobState(jobs.submit, jobs.deadline, tput, max_level, work, ts.cluster.gpus, slot=ts.slot)
    t0 = time.perf_counter()
    rep = replay(state, sched, size_class(jobs.num_gpu), len(SIZE_CLASSES), time_limit=ts.time_limit_s)
    secs = time.perf_counter() - t0
    if count == "declared":
        rep.met = rep.met & (tl.declared >= tl.true)  # a job stopped at its declared count never reached its target
    return jobs, scored, rep, secs, tl


def target_method_settings(run: TraceRunSettings, counts: dict[str, str]) -> dict:
    """{method: the settings its target-loss rows depend on}: its trace scheduler, the count it plans on and, for a
    ``predicted`` count, the predictor, band and prior quantile."""
    out = method_settings(run.methods)
    for m in run.methods:
        out[m.name]["trace_count"] = counts[m.name]
        if m.keys.count == "predicted":
            out[m.name]["predicted"] = {
                "predictor": m.keys.predictor,
                "band": m.keys.band,
                "prior_quantile": m.keys.prior_quantile,
            }
    return out


def target_bank(bank=None, log=print):
    """The curve bank target-loss jobs draw their curves from (``bank``: read by the check before any work; None:
    the default); when the real (task-zoo) bank is absent and the parametric one stands in, one line says so
    (stderr, and ``bank_note`` of the results): (bank, note or None)."""
    bank = bank if bank is not None else load_bank(default_bank_path())
    note = stand_in_note(bank.path)
    if note:
        log(note)
    return bank, note


def run_target_loss(run: TraceRunSettings, out: Path, log=print, bank=None) -> dict:
    """Every method on target-loss jobs of every window; results as a trace run's, plus each job's counts
    (``bank``: the curve bank the jobs' curves come from, read by the check before any work; None: the default)."""
    ts = run.trace
    trace, windows = trace_windows(ts)
    counts = check_target_loss_run(run, trace)
    bank, note = target_bank(bank, runlog.warning)
    log(
        f"target-loss jobs of {ts.path}: cluster {ts.cluster.name}, {len(windows)} {ts.split} window(s), methods "
        + ", ".join(f"{m.name} ({m.keys.count} count)" for m in run.methods)
    )
    protocol = {
        **trace_protocol(ts, trace, windows),
        "jobs": "target_loss",
        "target_seed": ts.target_seed,
        "declare_quantile": ts.declare_quantile,
        "bank": str(bank.path),
        **({"bank_note": note} if note else {}),
        "estimate_every_s": ts.estimate_every_s,
    }
    settings = target_method_settings(run, counts)
    earlier = earlier_trace_results(out, protocol, settings, run.resume)
    t = TraceTally()
    for method in run.methods:
        name, keys, predictor = method.name, method.keys, None
        if reuse(name, earlier, t.rows, t.windows, t.timings, {}, log):
            continue
        t.timings[name] = 0.0
        if method.bound is not None:  # target-loss jobs' true counts are the trace's: the same bound
            t.timings[name] = bound_windows(name, method.bound, trace, windows, ts, t.rows, t.windows, log)[0]
            continue
        if keys.count == "predicted":
            predictor = predictor_from(keys.predictor, bank.path)
        for w in windows:
            jobs, scored, rep, secs, tl = replay_target_window(trace, w, ts, keys, bank, predictor, ts.estimate_every_s)
            line = t.add_window(
                name, w is windows[0], w, jobs, scored, rep, secs, ts, target_rows(name, w, jobs, scored, rep, tl)
            )
            short = float((tl.declared[scored] < tl.true[scored]).mean())
            log(f"{line} (declared count short of the true one: {short:.3f} of jobs)")
    return t.write(protocol, out, run, settings, earlier)


def target_rows(name: str, w, jobs, scored, rep, tl) -> list[dict]:
    """A trace run's job rows of one window, each with its job's true and declared counts, target and family."""
    new = job_rows(name, w, jobs, scored, rep)
    for r, j in zip(new, np.flatnonzero(scored)):
        r.update(
            true_iterations=float(tl.true[j]),
            declared_iterations=float(tl.declared[j]),
            target_loss=float(tl.target[j]),
            family=str(tl.family[j]),
        )
    return new
