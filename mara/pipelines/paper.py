"""``python -m mara.train experiment=paper``: the paper's whole protocol (§5, A.3) in one resumable run.

The protocol is a graph of single-threaded jobs (:mod:`mara.core.jobs`) that ``paper.workers`` processes run side
by side, costliest ready job first, each in its own folder of the run and each skipped on a rerun when its
``DONE.json`` is there:
  ``predictor/``                       the FM stage, once (``fm.ckpt``);
  ``policy/<method>/seed<S>/``         MAT-PPO for every learned method × training seed (``paper.trained``), after
                                       the FM stage when the method reads FM estimates;
  ``evaluation/methods/<method>/``     one method on the protocol's identical episodes — the rules and bounds start at
                                       once, a learned method when its trainings are finished;
  ``stress/methods/<method>/``         the same on the infeasible-task stress scenario (§5.4);
  ``prediction/``                      the prediction benchmark (Table 1, Figure 3) with this run's FM checkpoint.
Then, in this process: ``evaluation/results.json`` and ``stress/results.json`` merged from the methods' folders, and
``report.md`` / ``report.json`` (Tables 1–5 and Figures 3–4 beside the paper's numbers).
"""

from __future__ import annotations

import json
import os
import time
from pathlib import Path

from omegaconf import DictConfig, OmegaConf, open_dict

from mara.core.config import CONF_DIR, load_method_cfg
from mara.core.files import write_text_atomic
from mara.core.jobs import Job, run_jobs
from mara.core.registry import find_conf, predictor_file
from mara.core.runlog import fmt_seconds, log, setup_logging
from mara.eval.prediction import run_prediction_experiment
from mara.eval.settings import prediction_settings
from mara.evaluate import evaluate
from mara.mat.train import train_policy
from mara.predictors.fm.train import train_predictor
from mara.report.paper import write_report
from mara.report.results import build_results, write_results
from mara.train_settings import PaperSettings, mat_settings, predictor_training

# Single-thread CPU minutes of each kind of job (start order and ETA weights), measured on these 2 cores: a default
# MAT training ≈ 6 min (341 s user time), Clairvoyant ≈ 13 min of CP-SAT over 720 episodes; the rest estimated.
COST = {
    "predictor": 5.0,
    "train": 6.0,
    "train_paper": 4.0,
    "prediction": 2.0,
    "bound": 13.0,
    "fm_method": 2.0,
    "learned_eval": 4.0,
    "rule": 0.5,
    "stress": 0.15,
}


def _with(cfg: DictConfig, **updates) -> DictConfig:
    c = cfg.copy()
    with open_dict(c):
        for key, value in updates.items():
            OmegaConf.update(c, key, value, merge=False)
    return c


def training_jobs(paper: PaperSettings, out: Path) -> list[dict]:
    """One job per (learned method, training seed): its folder and the config changes that train it."""
    jobs = []
    for method, spec in paper.trained.items():
        if method not in paper.methods:
            continue
        for seed in paper.seeds:
            jobs.append(
                {
                    "method": method,
                    "seed": seed,
                    "predictor": spec.predictor,
                    "reward": spec.reward,
                    "mat": spec.mat,
                    "dir": str(out / "policy" / method / f"seed{seed}"),
                }
            )
    return jobs


def _job_cfg(cfg: DictConfig, job: dict, fm_ckpt: str | None) -> DictConfig:
    if job["predictor"] == "fm":
        pred = OmegaConf.to_container(cfg.predictor, resolve=True)
        pred["ckpt_path"] = fm_ckpt or pred.get("ckpt_path")
    else:
        pred = OmegaConf.to_container(OmegaConf.load(predictor_file(job["predictor"])), resolve=True)
    mat = cfg.mat
    if job.get("mat"):  # another training recipe (conf/mat/<name>.yaml, e.g. paper), laid over the composed default
        recipe = OmegaConf.load(find_conf("mat", f"{job['mat']}.yaml"))
        recipe.pop("defaults", None)
        mat = OmegaConf.merge(cfg.mat, recipe)
    return _with(
        cfg,
        seed=job["seed"],
        reward=job["reward"],
        predictor=pred,
        mat=OmegaConf.to_container(mat, resolve=True),
        **{"paths.output_dir": str(job["dir"])},
        **{"mat.run_name": f"policy {job['method']} seed {job['seed']}"},
    )


def _fm_from(deps: dict, fm_ckpt: str | None) -> str | None:
    """This run's FM checkpoint: the predictor job's, else the configured one (None: the shipped checkpoint)."""
    if "predictor" in deps:
        if deps["predictor"] is None:
            raise RuntimeError("the FM predictor stage failed (see predictor/job.log)")
        return deps["predictor"]["fm_ckpt"]
    return fm_ckpt


# ------------------------------------------------------------------------------------ jobs (worker side)
def _predictor_job(cfg_yaml: str, *, deps: dict) -> dict:

    r = train_predictor(predictor_training(OmegaConf.create(cfg_yaml)))
    return {"fm_ckpt": r.get("fm_ckpt"), "wall_s": r.get("wall_s"), "val_mae_fm": r.get("val/mae_fm")}


def _train_job(cfg_yaml: str, job: dict, fm_ckpt: str | None, *, deps: dict) -> dict:
    """One MAT training (single-threaded) into the job's folder."""

    cfg = OmegaConf.create(cfg_yaml)
    if job["predictor"] == "fm":
        cfg = _with(cfg, **{"predictor.ckpt_path": _fm_from(deps, fm_ckpt) or cfg.predictor.get("ckpt_path")})
    summary = train_policy(mat_settings(cfg))
    best = Path(job["dir"]) / "checkpoints" / "best.ckpt"
    return {
        "method": job["method"],
        "seed": job["seed"],
        "best_ckpt": str(best) if best.exists() else summary.get("last_ckpt"),
        "val_success_rate": summary.get("val_success_rate"),
    }  # wall_s: added by mara.core.jobs for every job


def _eval_job(
    cfg_yaml: str, method: str, folder: str, fm_ckpt: str | None, scenario: str | None, learned: bool, *, deps: dict
) -> dict:
    """One method on the protocol's episodes (a learned method: one allocator per finished training seed)."""

    cfg = OmegaConf.create(cfg_yaml)
    over = OmegaConf.to_container(cfg.method_overrides, resolve=True) if cfg.get("method_overrides") else {}
    if learned:
        ckpts = [
            {"train_seed": d["seed"], "ckpt_path": d["best_ckpt"]}
            for d in deps.values()
            if d and d.get("method") == method and d.get("best_ckpt")
        ]
        if not ckpts:
            raise RuntimeError(f"{method}: no finished training to evaluate")
        over.setdefault(method, {})["checkpoints"] = sorted(ckpts, key=lambda c: c["train_seed"])
    updates = {
        "paths.output_dir": folder,
        "methods": [method],
        "method_overrides": over,
        "eval.resume": True,
        "eval.tensorboard": False,
        "experiment_kind": None,
    }
    fm = _fm_from(deps, fm_ckpt)
    if fm:
        updates["predictors.fm.ckpt_path"] = fm
    if scenario is not None:
        updates["scenario"] = OmegaConf.to_container(OmegaConf.load(CONF_DIR / "scenario" / f"{scenario}.yaml"))
    res = evaluate(_with(cfg, **updates))
    if res.get("failed"):
        raise RuntimeError(res["failed"][method])
    return {"method": method, "skipped": res.get("skipped") or {}, "eval_s": (res.get("timings") or {}).get(method)}


def _prediction_job(cfg_yaml: str, fm_ckpt: str | None, *, deps: dict) -> dict:

    cfg = OmegaConf.create(cfg_yaml)
    fm = _fm_from(deps, fm_ckpt)
    if fm:
        cfg = _with(cfg, **{"prediction.fm.ckpt_path": fm})
    run_prediction_experiment(prediction_settings(cfg), cfg.paths.output_dir)
    return {}


# ------------------------------------------------------------------------------------ the graph (parent side)
def _uses_fm(paper: PaperSettings, method: str) -> bool:
    if method in paper.trained:
        return paper.trained[method].predictor == "fm"
    return load_method_cfg(method).get("predictor") == "fm"


def _eval_cost(paper: PaperSettings, method: str) -> float:
    if method in paper.trained:
        return COST["learned_eval"]
    if method == "Clairvoyant":
        return COST["bound"]
    return COST["fm_method"] if _uses_fm(paper, method) else COST["rule"]


def build_jobs(paper: PaperSettings, out: Path) -> list[Job]:
    """Every job of the protocol with its dependencies (see the module docstring); each job's config is made from
    the composed config the parse serialised (``paper.composed``)."""
    cfg = OmegaConf.create(paper.composed)
    jobs: list[Job] = []
    fm_ckpt = cfg.predictor.get("ckpt_path")
    has_fm_job = bool(paper.train_predictor and not fm_ckpt)
    fm_dep = ("predictor",) if has_fm_job else ()
    if has_fm_job:
        pc = _with(cfg, **{"paths.output_dir": str(out / "predictor")})
        jobs.append(
            Job(
                "predictor",
                out / "predictor",
                _predictor_job,
                (OmegaConf.to_yaml(pc, resolve=True),),
                cost=COST["predictor"],
            )
        )
    trained_by: dict[str, list[str]] = {}
    for t in training_jobs(paper, out):
        name = f"train {t['method']} s{t['seed']}"
        trained_by.setdefault(t["method"], []).append(name)
        deps = fm_dep if t["predictor"] == "fm" else ()
        jobs.append(
            Job(
                name,
                Path(t["dir"]),
                _train_job,
                (OmegaConf.to_yaml(_job_cfg(cfg, t, None), resolve=True), t, fm_ckpt),
                deps=deps,
                cost=COST["train_paper"] if t.get("mat") == "paper" else COST["train"],
            )
        )
    base_yaml = paper.composed
    scenarios = [("evaluation", None, 1.0)]
    if paper.stress_scenario:
        scenarios.append(("stress", paper.stress_scenario, COST["stress"]))
    for folder_name, scenario, scale in scenarios:
        for m in paper.methods:
            learned = m in paper.trained
            deps = (fm_dep if _uses_fm(paper, m) else ()) + tuple(trained_by.get(m, ()))
            folder = out / folder_name / "methods" / m
            jobs.append(
                Job(
                    f"{folder_name} {m}",
                    folder,
                    _eval_job,
                    (base_yaml, m, str(folder), fm_ckpt, scenario, learned),
                    deps=deps,
                    cost=scale * _eval_cost(paper, m),
                )
            )
    own_fm = cfg.predictor.get("name", "fm") == "fm"
    fm = OmegaConf.to_container(cfg.predictor if own_fm else OmegaConf.load(predictor_file("fm")), resolve=True)
    pcfg = OmegaConf.to_container(cfg.paper.prediction, resolve=True) if cfg.paper.get("prediction") else {}
    pcfg["fm"] = fm
    pred_cfg = _with(cfg, prediction=pcfg, **{"paths.output_dir": str(out / "prediction")})
    jobs.append(
        Job(
            "prediction",
            out / "prediction",
            _prediction_job,
            (OmegaConf.to_yaml(pred_cfg, resolve=True), fm_ckpt),
            deps=fm_dep,
            cost=COST["prediction"],
        )
    )
    return jobs


_SECTION_KEYS = {
    "schema",
    "rows",
    "summary",
    "diagnostics",
    "timings",
    "skipped",
    "failed",
    "method_overrides",
    "paths",
}


def merge_results(folder: Path, methods: list[str], errors: dict, title: str) -> dict:
    """``<folder>/results.json`` / ``results.md`` / figure / TensorBoard from the methods' own folders, in ``methods``
    order; a method whose job failed is listed under ``failed`` with its one-line reason."""

    rows, timings, skipped, failed, overrides, extra = [], {}, {}, {}, {}, {}
    for m in methods:
        err = errors.get(f"{folder.name} {m}")
        p = folder / "methods" / m / "results.json"
        if err is not None:
            failed[m] = err
            continue
        if not p.exists():
            continue
        r = json.loads(p.read_text())
        rows += r.get("rows", [])
        timings.update(r.get("timings") or {})
        skipped.update(r.get("skipped") or {})
        failed.update(r.get("failed") or {})
        overrides.update(r.get("method_overrides") or {})
        extra.update({k: v for k, v in r.items() if k not in _SECTION_KEYS})
    res = build_results(rows, dict(extra, timings=timings, skipped=skipped, failed=failed, method_overrides=overrides))
    write_results(res, folder, title=title)
    return res


def _job_times(jobs: list[Job], results: dict) -> dict:
    """Seconds of single-threaded job time by kind (summed over every invocation that ran them)."""
    kinds = {
        "predictor": "predictor",
        "train": "trainings",
        "evaluation": "evaluation",
        "stress": "stress",
        "prediction": "prediction",
    }
    out: dict = {}
    for j in jobs:
        info = results.get(j.name)
        if info and isinstance(info.get("wall_s"), (int, float)):
            k = kinds[j.name.split(" ")[0]]
            out[k] = out.get(k, 0.0) + float(info["wall_s"])
    return out


def run_paper(paper: PaperSettings, out: Path) -> dict:
    """Run (or resume) the paper protocol in ``out`` (its settings parsed and checked before any work); returns what
    each job did."""

    setup_logging()
    t_start = time.time()
    tfile = out / "stage_timings.json"
    timings = json.loads(tfile.read_text()) if tfile.exists() else {}
    if "wall_s" not in timings:  # an older run folder's per-stage walls
        timings = {"wall_s": float(sum(v for v in timings.values() if isinstance(v, (int, float))))}
    jobs = build_jobs(paper, out)
    workers = paper.workers
    if workers is None:
        workers = len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else (os.cpu_count() or 1)
    log.info(
        f"paper protocol: {len(jobs)} jobs (FM stage, {sum(j.name.startswith('train') for j in jobs)} trainings, "
        f"{sum(j.name.startswith(('evaluation', 'stress')) for j in jobs)} method evaluations, prediction) on "
        f"{workers} workers"
    )
    results, errors = run_jobs(jobs, workers, title="paper")
    methods = list(paper.methods)
    merged = {"evaluation": merge_results(out / "evaluation", methods, errors, "Evaluation (random)")}
    if paper.stress_scenario:
        merged["stress"] = merge_results(out / "stress", methods, errors, "Evaluation (stress)")
    timings["wall_s"] = timings["wall_s"] + (time.time() - t_start)
    timings.update({"workers": workers, "job_s": _job_times(jobs, results)})
    write_text_atomic(tfile, json.dumps(timings, indent=1))
    paths = write_report(out, timings=timings)
    for name, reason in errors.items():
        log.warning(f"{name} failed: {reason}")
    log.info(
        f"paper protocol: done in {fmt_seconds(time.time() - t_start)} (this invocation); report: {out / 'report.md'}"
    )
    result = {
        "output_dir": str(out),
        "jobs": results,
        "errors": errors,
        "report": {k: str(v) for k, v in paths.items()},
        "skipped": {k: v.get("skipped") for k, v in merged.items()},
    }
    write_text_atomic(out / "train_result.json", json.dumps(result, indent=1, default=str))
    return result
