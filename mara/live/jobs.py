"""Schedule a user's job file live: ``python -m mara.live jobs=<file>`` (or ``mara.live.schedule.schedule``).

Each job (``mara.live.jobfile``) becomes a task of one live episode — arrival, deadline = arrival + budget, ε, cap —
and a ``UserJobSpec`` the worker pools train exactly as they train zoo jobs (``mara.live.job.TrainingJob``), so the
simulator's rules, preemption, resume, worker-failure handling, replay and report are live mode's own. Losses are the
modules' raw training losses (no normalisation): ε is compared with their running mean L(s), and the predictors and the
curve bank see the same numbers.
"""

from __future__ import annotations

import json
import time
from dataclasses import asdict, replace
from pathlib import Path

import numpy as np
import torch

from mara.core.config import ConfigError, load_method_cfg
from mara.curves.bank import write_bank
from mara.eval.runner import node_options
from mara.eval.settings import bank_at
from mara.live.band import band_exit
from mara.live.driver import metric_reached, replay, run_live
from mara.live.job import (
    TrainingJob,
    UserJobSpec,
    first_optimizer,
    step_loss,
    target_class,
    to_device,
)
from mara.live.jobfile import UserJob, load_jobfile, parse_jobs, with_budget
from mara.live.pools import make_pool, pool_options
from mara.live.progress import say_worker_failures, step_reporter, tensorboard_writer
from mara.live.report import STATUS, say, write_report
from mara.live.settings import LiveSettings
from mara.live.validation import fixed_order, has_validation_step, validate

JOBS_BANK = "job_curves.parquet"
#: the sizes the shipped MARA policy was trained for (mara/data/checkpoints/mara_live.ckpt; docs/live.md)
MARA_SIZES = {"nodes": 2, "max_active": 4}


def read_jobs(run: LiveSettings) -> list[UserJob]:
    """``run.jobs``: a job-file path, or the jobs themselves (a list, or a mapping with ``jobs``)."""
    src = run.jobs
    if isinstance(src, str):  # ${live.data_root} and the like resolve against this run's settings
        live = {k: list(v) if isinstance(v, tuple) else v for k, v in asdict(run.live).items()}
        return load_jobfile(src, {"live": live, "sim": dict(run.sim)})
    return parse_jobs(src, "jobs")


def _spec(job_id: int, job: UserJob, batch_size: int) -> UserJobSpec:
    return UserJobSpec(
        job_id=job_id,
        family=job.family,
        seed=job.seed,
        batch_size=batch_size,
        lr=0.0,
        source="user",
        name=job.name,
        module_target=job.module_target,
        module_args=json.dumps(job.module_args),
        data_target=job.data_target,
        data_args=json.dumps(job.data_args),
    )


def check_validation(where: str, job: UserJob, module, dm) -> None:
    """A metric target's dry check: the module has a ``validation_step``, the DataModule a ``val_dataloader()``, and one
    validation batch logs the named metric as a number; else a one-line ConfigError naming the field."""
    name = job.metric["name"]
    if not has_validation_step(module):
        raise ConfigError(
            f"{where}: module.validation_step: missing (target.metric {name!r} is what validation_step "
            f"logs with self.log)"
        )
    try:
        loader = fixed_order(dm.val_dataloader())
        len(loader.dataset)
    except Exception as exc:
        raise ConfigError(
            f"{where}: data.val_dataloader: cannot build it with a dataset and a batch_size for target.metric "
            f"({type(exc).__name__}: {exc})"
        ) from None
    try:
        logged = validate(module, loader, torch.device("cpu"), limit=1)
    except Exception as exc:
        raise ConfigError(
            f"{where}: module.validation_step: fails on a validation batch ({type(exc).__name__}: {exc})"
        ) from None
    if logged.get(name) is None:
        got = ", ".join(sorted(logged)) or "nothing"
        raise ConfigError(
            f"{where}: target.metric: validation_step does not log {name!r} as a number (logged: {got}; a "
            f"number is a float, a one-element tensor or a torchmetrics Metric, reduce_fx mean/sum/max/min)"
        )


def check_targets(job: UserJob, source: str) -> None:
    """Both of ``job``'s targets are classes of the right kind (:func:`target_class`), before anything is called."""
    where = f"{source}: job {job.name!r}"
    for field, target in (("module", job.module_target), ("data", job.data_target)):
        target_class(where, field, target)


def check_job(job_id: int, job: UserJob, source: str, obs_every: int = 10) -> UserJobSpec:
    """Import, build and run one ``training_step`` of ``job`` (no optimiser step), and for a metric target one
    validation batch; its spec (validations every ``job.val_every`` or ``obs_every`` batches), or a one-line
    ConfigError."""
    where = f"{source}: job {job.name!r}"
    check_targets(job, source)
    probe = _spec(job_id, job, 1)
    try:
        dm = probe.build_datamodule()
        loader = dm.train_dataloader()
        batch_size = int(loader.batch_size)
        len(loader.dataset)
    except Exception as exc:
        raise ConfigError(
            f"{where}: data: cannot build its train_dataloader() with a dataset and a batch_size "
            f"({type(exc).__name__}: {exc})"
        ) from None
    spec = _spec(job_id, job, batch_size)
    try:
        module, batches = spec.build_run()
    except Exception as exc:
        field = "data" if "dataset of" in str(exc) else "module"
        raise ConfigError(f"{where}: {field}: cannot build the run ({type(exc).__name__}: {exc})") from None
    try:
        optimizer = first_optimizer(module.configure_optimizers())
    except Exception as exc:
        raise ConfigError(f"{where}: module.configure_optimizers: {type(exc).__name__}: {exc}") from None
    # the recipe's lr, as the predictors read it (FM's context includes log lr): the optimiser's own
    spec = replace(spec, lr=float(optimizer.param_groups[0]["lr"]))
    try:
        module.train()
        out = module.training_step(to_device(batches.next(), torch.device("cpu")), 0)
    except Exception as exc:
        raise ConfigError(f"{where}: module.training_step: fails on a batch ({type(exc).__name__}: {exc})") from None
    loss = step_loss(out)
    if loss is None:
        raise ConfigError(
            f"{where}: module.training_step: returns no loss (a scalar tensor with a gradient, "
            f"or {{'loss': tensor}}), got {type(out).__name__}"
        )
    if not bool(torch.isfinite(loss.detach()).all()):  # a NaN loss would train to NaN weights and never reach ε
        raise ConfigError(
            f"{where}: module.training_step: the loss of the first batch is {float(loss.detach())} "
            f"(not a finite number); check the module's loss and its data"
        )
    if job.metric:
        check_validation(where, job, module, dm)
    return replace(
        spec,
        val_metric=job.metric["name"] if job.metric else "",
        val_every=int(job.val_every or obs_every) if job.metric else 0,
    )


def batch_seconds(spec: UserJobSpec, where: str, n: int = 3) -> float:
    """Median wall seconds of ``n`` real optimisation steps of a throwaway copy of the job (after every check
    passed)."""
    trial, times = TrainingJob(spec), []
    try:
        for _ in range(n):
            t0 = time.perf_counter()
            trial.step()
            times.append(time.perf_counter() - t0)
    except Exception as exc:
        raise ConfigError(f"{where}: module: a training batch fails ({type(exc).__name__}: {exc})") from None
    return float(np.median(times))


def job_tasks(jobs: list[UserJob], specs: list[UserJobSpec], sim: dict) -> tuple[list[dict], list[UserJobSpec]]:
    """Tasks (arrival order = job id, as live episodes need) and their specs renumbered to match."""
    speed = node_options(sim)["node_speed"]
    s_max = 1 if speed is None else int(np.max(speed))
    order = sorted(range(len(jobs)), key=lambda i: jobs[i].arrival)  # stable: file order within a step
    tasks, out = [], []
    for j, i in enumerate(order):
        job, spec = jobs[i], specs[i]
        tasks.append(
            {
                "arrival": job.arrival,
                "budget": job.budget,
                "eps": job.eps,
                "family": job.family,
                "curve_row": j,
                "cap": job.max_batches or job.budget * s_max,
                "batch_size": spec.batch_size,
                "lr": spec.lr,
                "name": job.name,
                **({"metric": dict(job.metric)} if job.metric else {}),
            }
        )
        out.append(UserJobSpec(**{**spec.to_dict(), "job_id": j}))
    return tasks, out


def choose_methods(run: LiveSettings, sim: dict) -> tuple[list[str], str | None]:
    """``jobs_methods``: a list as given; ``auto``: MARA where its shipped policy fits this cluster, else EDF (a
    note)."""
    chosen = run.jobs_methods
    if chosen != "auto":
        return list(chosen), None
    opts = node_options(sim)
    fits = (
        int(sim["nodes"]) == MARA_SIZES["nodes"]
        and int(sim["max_active"]) == MARA_SIZES["max_active"]
        and opts["node_speed"] is None
        and opts["switch_cost"] == 0
    )
    own = run.method_overrides.get("MARA") or {}
    if fits or own.get("ckpt_path") or run.live.policy_ckpt:  # a policy of one's own: checked for M/K
        return ["MARA"], None
    return ["EDF"], (
        f"method EDF: the shipped MARA policy supports M={MARA_SIZES['nodes']} nodes, K={MARA_SIZES['max_active']}, "
        f"identical nodes only (this cluster: M={sim['nodes']}, K={sim['max_active']}); "
        f"train one for this size or pick methods with jobs_methods=[...]"
    )


def metric_outcome(target: dict, history: list) -> dict:
    """A metric target's outcome from its validations ([step, batch, value], ...): the target, how many validations ran,
    the last value and where it was taken, and the first validation that reached the target (None if none did)."""
    crossed = next((h for h in history if metric_reached(h[2], target["mode"], target["value"])), None)
    last = history[-1] if history else None
    return {
        **target,
        "validations": len(history),
        "last_value": last[2] if last else None,
        "last_at_batch": last[1] if last else None,
        "crossed_at_batch": crossed[1] if crossed else None,
        "crossed_at_step": crossed[0] if crossed else None,
        "crossed_value": crossed[2] if crossed else None,
    }


def job_outcomes(tasks: list[dict], run: dict, obs_every: int) -> list[dict]:
    """Per job of one run: name, status, batches, final running-mean loss, finish step, worker failure, band check, and
    for a metric target its validations (``metric_outcome``)."""
    failures = {f["job"]: f for f in run["worker_failures"]}
    out = []
    for j, t in enumerate(tasks):
        losses = run["losses"][j]
        out.append(
            {
                "job": j,
                "name": t["name"],
                "family": t["family"],
                "arrival": t["arrival"],
                "deadline": t["arrival"] + t["budget"],
                "target_loss": t["eps"],
                "status": STATUS.get(run["status"][j], "unfinished"),
                "batches": len(losses),
                "final_mean_loss": float(np.mean(losses)) if losses else None,
                "finish_step": int(run["finish_time"][j]) if run["status"][j] == 3 or losses else None,
                "worker_failure": failures[j]["error"] if j in failures else None,
                "band": band_exit(losses, obs_every),
                **({"metric": metric_outcome(t["metric"], run["metrics"][j])} if t.get("metric") else {}),
            }
        )
    return out


def metric_line(m: dict) -> str:
    """The progress line's words for a metric target's outcome."""
    if not m["validations"]:
        return f"; {m['name']}: never validated (target {m['mode']} {m['value']})"
    where = (
        f"reached at batch {m['crossed_at_batch']} ({m['crossed_value']:.4f})"
        if m["crossed_at_batch"] is not None
        else f"not reached (target {m['mode']} {m['value']})"
    )
    return f"; {m['name']} {m['last_value']:.4f} at batch {m['last_at_batch']}, {where}"


def bank_records(tasks: list[dict], runs: list[dict], split: str = "pool", obs_every: int = 10) -> list[dict]:
    """Every run's per-batch losses as curve-bank rows (``data_source=live``): a user's own history.

    ``split``: ``pool`` (every curve; ε calibration and episodes read pool rows) or ``fm`` (predictor training data for
    ``python -m mara.train stage=predictor bank.path=...``: every 4th curve ``fm_val``, the others ``fm_train``; curves
    shorter than 8 observations are left out, as the predictor's validation queries need at least 4 in half a curve)."""
    if split not in ("pool", "fm"):
        raise ConfigError(f"jobs_bank_split must be pool or fm, got {split!r}")
    records = []
    for r in runs:
        for j, losses in enumerate(r["losses"]):
            if split == "fm" and len(losses) < 8 * obs_every:
                continue
            if losses:
                t = tasks[j]
                row_split = split if split == "pool" else ("fm_val" if len(records) % 4 == 3 else "fm_train")
                records.append(
                    {
                        "curve_id": f"jobs/{r['method']}/{t['name']}",
                        "family": t["family"],
                        "split": row_split,
                        "data_source": "live",
                        "batch_size": t["batch_size"],
                        "lr": t["lr"],
                        "seed": 0,
                        "losses": losses,
                        "meta": {
                            "job": t["name"],
                            "method": r["method"],
                            "arrival": t["arrival"],
                            "budget": t["budget"],
                            "eps": t["eps"],
                            "cap": t["cap"],
                        },
                    }
                )
    return records


def run_jobs(run: LiveSettings, out: Path, method_plans) -> dict:
    """Check every job, run them under each chosen method on live workers, replay, and write the report;
    ``method_plans(methods, run, bank_path, notes)`` is live mode's (``mara.live.run``): [(name, factory,
    predictor)]."""
    lv, sim = run.live, dict(run.sim)
    source = run.jobs if isinstance(run.jobs, str) else "jobs"
    jobs = read_jobs(run)
    methods, note = choose_methods(run, sim)
    for m in methods:
        load_method_cfg(m)  # unknown names fail before any work
    label = f"jobs file {source}" if isinstance(run.jobs, str) else "jobs"
    for job in jobs:  # every job's classes are of the right kind before any job's class is called
        check_targets(job, label)
    specs = [check_job(i, job, label, int(sim["obs_every"])) for i, job in enumerate(jobs)]
    notes = [note] if note else []
    if note:
        say(f"note: {note}")
    if any(j.budget is None for j in jobs):  # deadlines in minutes: measure a step (every job passed its checks)
        jobs = _budgets_in_steps(jobs, specs, label, notes)
    tasks, specs = job_tasks(jobs, specs, sim)
    bank = bank_at(run.bank_path)  # the predictors' bank (MARA's FM, Slack's WLS)
    plans = method_plans(methods, run, bank.path, notes)
    pool_opts = pool_options(lv.device, lv.threads, dict(lv.crash), dict(lv.ray))
    say(
        f"jobs: {', '.join(m for m, _, _ in plans)} on {len(tasks)} job(s) from {source}, M={sim['nodes']} nodes, "
        f"K={sim['max_active']}, workers={lv.workers} -> {out}"
    )
    tb = tensorboard_writer(bool(lv.tensorboard), out)
    meta = {"task_set": ["jobs"], "load": [0.0], "root": [0], "episode": [0]}
    n_steps = max(int(sim["steps"]), max(t["arrival"] for t in tasks) + 1)
    sim = {**sim, "steps": n_steps}  # the arrival window covers every job's arrival
    runs = []
    for m, factory, predictor in plans:
        pool = make_pool(str(lv.workers), **pool_opts)
        progress = step_reporter(m, int(lv.progress_every))
        res = run_live(tasks, specs, factory(), pool, sim, predictor, meta, progress)
        say_worker_failures(m, res["worker_failures"], lambda j: repr(tasks[j]["name"]))
        if lv.replay:
            res["replay"] = replay(tasks, res["losses"], factory(), sim, predictor, meta, res.get("metrics"))
        runs.append({"method": m, "episode": 0, **res})
        if tb is not None:
            _job_scalars(tb, m, tasks, res)
    if tb is not None:
        tb.close()
    records = bank_records(tasks, runs, run.jobs_bank_split, int(sim["obs_every"]))
    bank_path = out / JOBS_BANK
    if records:
        write_bank(bank_path, records, {"generator": "mara.live.jobs", "source": str(source)})
    families = sorted({t["family"] for t in tasks})
    view = replace(
        run,
        live=replace(run.live, families=tuple(families), load=0.0, root=0, episodes=1, time_scale=1.0),
        sim={**run.sim, "steps": n_steps},
    )
    table = {t["name"]: {"eps": t["eps"], "budget": t["budget"], "cap": t["cap"]} for t in tasks}
    labelled = [dict(t, family=f"{t['name']} ({t['family']})") for t in tasks]  # the timeline's legend names the jobs
    res = write_report(
        view, out, runs, [(labelled, specs)], table, "user", notes, bank_path if records else None, "job file targets"
    )
    outcomes = {r["method"]: job_outcomes(tasks, r, int(sim["obs_every"])) for r in runs}
    (out / "job_outcomes.json").write_text(json.dumps(outcomes, indent=1))
    _say_outcomes(outcomes)
    res["outcomes"] = outcomes
    res["paths"]["outcomes"] = str(out / "job_outcomes.json")
    return res


def _budgets_in_steps(jobs: list[UserJob], specs, label: str, notes: list[str]) -> list[UserJob]:
    """Jobs whose deadlines are in minutes, converted at the slowest job's measured batch time per scheduler step;
    the conversion is said and joins ``notes``."""
    step_s = max(batch_seconds(spec, f"{label}: job {job.name!r}") for spec, job in zip(specs, jobs))
    jobs = [with_budget(j, step_s) for j in jobs]
    notes.append(
        f"deadlines in minutes converted at {step_s:.3f} s per scheduler step (measured here: the slowest job's "
        f"batch time; set step_seconds in the job file to fix it)"
    )
    say(f"note: {notes[-1]}")
    return jobs


def _job_scalars(tb, method: str, tasks: list[dict], res: dict) -> None:
    """A finished run's TensorBoard scalars: every job's losses (and a metric target's validations), the summary."""
    for j, losses in enumerate(res["losses"]):
        for s, loss in enumerate(losses, 1):
            tb.add_scalar(f"{method}/{tasks[j]['name']}/loss", loss, s)
        for _, s, value in res["metrics"][j] if tasks[j].get("metric") else ():  # a metric target's validations
            tb.add_scalar(f"{method}/{tasks[j]['name']}/{tasks[j]['metric']['name']}", value, s)
    for k in ("success_rate", "utilization", "wall_s"):
        if res[k] is not None:
            tb.add_scalar(f"summary/{method}/{k}", res[k], 0)


def _say_outcomes(outcomes: dict) -> None:
    """One line per job and method: its status, batches and final loss or metric, and where its observed loss left
    its predicted band."""
    for m, rows in outcomes.items():
        for o in rows:
            say(
                f"[{m}] {o['name']}: {o['status']} after {o['batches']} batches"
                + (
                    f", mean loss {o['final_mean_loss']:.4f}"
                    + ("" if "metric" in o else f" (target {o['target_loss']})")
                    if o["final_mean_loss"] is not None
                    else ""
                )
                + (metric_line(o["metric"]) if "metric" in o else "")
                + (f"; worker failure: {o['worker_failure']}" if o["worker_failure"] else "")
            )
            band = o["band"]
            if band.get("left_at_batch") is not None:
                say(
                    f"[{m}] {o['name']}: observed mean loss left its predicted band at batch {band['left_at_batch']} "
                    f"({band['observed']:.4f} outside [{band['band'][0]:.4f}, {band['band'][1]:.4f}], fitted on the "
                    "first "
                    f"{band['fitted_batches']} batches): its remaining-batch estimates were unreliable"
                )
