"""``python -m mara.train experiment=paper``: the paper's whole protocol (§5, A.3) in one resumable run.

Stages, each into its own folder of the run and each skipped when its marker (``DONE.json``) is there:
  1. ``predictor/``           the FM stage, once (``fm.ckpt``);
  2. ``policy/<method>/seed<S>/`` MAT-PPO for every learned method × training seed (``paper.trained``), in
                              parallel worker processes (``paper.workers``, one thread each);
  3. ``evaluation/``          every method of ``paper.methods`` on identical episodes (per-method resume);
  4. ``stress/``              the infeasible-task stress scenario (§5.4), same methods;
  5. ``prediction/``          the prediction benchmark (Table 1, Figure 3) with this run's FM checkpoint;
  6. ``report.md`` / ``report.json``: Tables 1–5 and Figures 3–4 beside the paper's numbers.
"""
from __future__ import annotations

import json
import multiprocessing as mp
import os
import re
import time
from concurrent.futures import FIRST_COMPLETED, ProcessPoolExecutor, wait
from pathlib import Path

from omegaconf import DictConfig, OmegaConf, open_dict

from mara.eval.methods import CONF_DIR, ConfigError
from mara.eval.report import write_text_atomic
from mara.runlog import Progress, fmt_seconds, log, setup_logging

MARKER = "DONE.json"


def _done(folder: Path) -> dict | None:
    p = folder / MARKER
    return json.loads(p.read_text()) if p.exists() else None


def _mark(folder: Path, info: dict) -> None:
    folder.mkdir(parents=True, exist_ok=True)
    write_text_atomic(folder / MARKER, json.dumps(info, indent=1, default=str))


def _with(cfg: DictConfig, **updates) -> DictConfig:
    c = cfg.copy()
    with open_dict(c):
        for key, value in updates.items():
            OmegaConf.update(c, key, value, merge=False)
    return c


def training_jobs(cfg: DictConfig, out: Path) -> list[dict]:
    """One job per (learned method, training seed): its folder and the config changes that train it."""
    jobs = []
    for method, spec in cfg.paper.trained.items():
        if method not in cfg.paper.methods:
            continue
        for seed in cfg.paper.seeds:
            jobs.append({"method": method, "seed": int(seed), "predictor": spec.get("predictor", "fm"),
                         "reward": spec.get("reward", "dense"), "mat": spec.get("mat"),
                         "dir": out / "policy" / method / f"seed{int(seed)}"})
    return jobs


def _train_job(cfg_yaml: str, job: dict) -> dict:
    """Worker process: one MAT training, single-threaded, logging into its own folder's ``train.log``."""
    os.environ["OMP_NUM_THREADS"] = os.environ["MKL_NUM_THREADS"] = "1"
    import torch

    torch.set_num_threads(1)
    folder = Path(job["dir"])
    folder.mkdir(parents=True, exist_ok=True)
    setup_logging(folder / "train.log")
    from mara.mat.train import train_policy

    cfg = OmegaConf.create(cfg_yaml)
    t0 = time.time()
    summary = train_policy(cfg)
    best = folder / "checkpoints" / "best.ckpt"
    info = {"method": job["method"], "seed": job["seed"], "best_ckpt": str(best) if best.exists() else summary.get("last_ckpt"),
            "val_success_rate": summary.get("val_success_rate"), "wall_s": time.time() - t0}
    _mark(folder, info)
    return info


def _job_cfg(cfg: DictConfig, job: dict, fm_ckpt: str | None) -> DictConfig:
    if job["predictor"] == "fm":
        pred = OmegaConf.to_container(cfg.predictor, resolve=True)
        pred["ckpt_path"] = fm_ckpt or pred.get("ckpt_path")
    else:
        pred = OmegaConf.to_container(OmegaConf.load(CONF_DIR / "predictor" / f"{job['predictor']}.yaml"), resolve=True)
    mat = cfg.mat
    if job.get("mat"):  # another training recipe (conf/mat/<name>.yaml, e.g. paper), laid over the composed default
        recipe = OmegaConf.load(CONF_DIR / "mat" / f"{job['mat']}.yaml")
        recipe.pop("defaults", None)
        mat = OmegaConf.merge(cfg.mat, recipe)
    return _with(cfg, seed=job["seed"], reward=job["reward"], predictor=pred, mat=OmegaConf.to_container(mat, resolve=True),
                 **{"paths.output_dir": str(job["dir"])}, **{"mat.run_name": f"policy {job['method']} seed {job['seed']}"})


def _last_percent(log_file: Path) -> float:
    """The last progress percentage a worker wrote into its log (0 if none yet)."""
    try:
        text = log_file.read_text()[-4000:]
    except OSError:
        return 0.0
    found = re.findall(r": +(\d+(?:\.\d+)?)% ", text)
    return float(found[-1]) / 100 if found else 0.0


def run_trainings(cfg: DictConfig, out: Path, fm_ckpt: str | None) -> list[dict]:
    """Every pending (method, seed) training, ``paper.workers`` at a time; finished ones are skipped."""
    jobs = training_jobs(cfg, out)
    done = {id(j): _done(j["dir"]) for j in jobs}
    pending = [j for j in jobs if not done[id(j)]]
    for j in jobs:
        if done[id(j)]:
            log.info(f"trainings: {j['method']} seed {j['seed']} already done ({j['dir']}), skipped")
    if pending:
        workers = max(1, min(int(cfg.paper.workers), len(pending)))
        log.info(f"trainings: {len(pending)} to run ({len(jobs) - len(pending)} done), {workers} at a time; logs in <run>/policy/<method>/seed<S>/train.log")
        progress = Progress(f"trainings ({len(pending)} runs)")
        t0 = time.time()
        for var in ("OMP_NUM_THREADS", "MKL_NUM_THREADS", "OPENBLAS_NUM_THREADS"):  # inherited by the workers before any import
            os.environ[var] = "1"
        with ProcessPoolExecutor(max_workers=workers, mp_context=mp.get_context("spawn")) as pool:
            futures = {pool.submit(_train_job, OmegaConf.to_yaml(_job_cfg(cfg, j, fm_ckpt), resolve=True), _plain(j)): j for j in pending}
            running = set(futures)
            while running:
                finished, running = wait(running, timeout=15, return_when=FIRST_COMPLETED)
                for f in finished:
                    j = futures[f]
                    try:
                        info = f.result()
                        done[id(j)] = info
                        log.info(f"trainings: {j['method']} seed {j['seed']} finished in {fmt_seconds(info['wall_s'])}, best validation {info['val_success_rate']}")
                    except Exception as exc:  # one failed training does not stop the others
                        log.error(f"trainings: {j['method']} seed {j['seed']} failed: {' '.join(str(exc).split())}")
                partial = sum(_last_percent(Path(futures[f]["dir"]) / "train.log") for f in running)
                n_done = sum(1 for f in futures if f.done())
                detail = f"{n_done}/{len(pending)} finished; running: " + ", ".join(
                    f"{futures[f]['method']} s{futures[f]['seed']} {100 * _last_percent(Path(futures[f]['dir']) / 'train.log'):.0f}%"
                    for f in running if (Path(futures[f]["dir"]) / "train.log").exists())
                progress.update((n_done + partial) / len(pending) if running else 1.0, detail)
        log.info(f"trainings: finished in {fmt_seconds(time.time() - t0)}")
    return [dict(_plain(j), **(done[id(j)] or {})) for j in jobs]


def _plain(job: dict) -> dict:
    return {k: (str(v) if isinstance(v, Path) else v) for k, v in job.items()}


def method_overrides(cfg: DictConfig, trainings: list[dict]) -> dict:
    """``method_overrides`` giving each learned method its finished checkpoints (one per training seed)."""
    over = OmegaConf.to_container(cfg.method_overrides, resolve=True) if cfg.get("method_overrides") else {}
    for t in trainings:
        if t.get("best_ckpt"):
            over.setdefault(t["method"], {}).setdefault("checkpoints", []).append({"train_seed": t["seed"], "ckpt_path": t["best_ckpt"]})
    return over


def _evaluation(cfg: DictConfig, folder: Path, methods: list[str], overrides: dict, fm_ckpt: str | None, scenario=None) -> dict:
    from mara.evaluate import evaluate

    info = _done(folder)
    if info:
        log.info(f"{folder.name}: already done, skipped")
        return info
    trained = set(cfg.paper.trained)
    usable = [m for m in methods if m not in trained or overrides.get(m, {}).get("checkpoints")]
    for m in sorted(set(methods) - set(usable)):
        log.warning(f"{folder.name}: {m} has no finished training, not evaluated")
    updates = {"paths.output_dir": str(folder), "methods": usable, "method_overrides": overrides, "eval.resume": True,
               "experiment_kind": None}
    if fm_ckpt:
        updates["predictors.fm.ckpt_path"] = fm_ckpt
    if scenario is not None:
        updates["scenario"] = OmegaConf.to_container(OmegaConf.load(CONF_DIR / "scenario" / f"{scenario}.yaml"))
    t0 = time.time()
    res = evaluate(_with(cfg, **updates))
    info = {"wall_s": time.time() - t0, "methods": usable, "skipped": res.get("skipped"), "failed": res.get("failed")}
    if not res.get("failed") and usable == list(methods):
        _mark(folder, info)
    return info


def _prediction(cfg: DictConfig, folder: Path, fm_ckpt: str | None) -> dict:
    from mara.eval.prediction import run_prediction_experiment

    info = _done(folder)
    if info:
        log.info("prediction: already done, skipped")
        return info
    fm = OmegaConf.to_container(cfg.predictor if cfg.predictor.get("name", "fm") == "fm" else OmegaConf.load(CONF_DIR / "predictor" / "fm.yaml"), resolve=True)
    if fm_ckpt:
        fm["ckpt_path"] = fm_ckpt
    pc = OmegaConf.to_container(cfg.paper.prediction, resolve=True) if cfg.paper.get("prediction") else {}
    pc["fm"] = fm
    t0 = time.time()
    log.info("prediction: FM vs WLS benchmark (Table 1, Figure 3)")
    run_prediction_experiment(_with(cfg, prediction=pc, **{"paths.output_dir": str(folder)}))
    info = {"wall_s": time.time() - t0}
    _mark(folder, info)
    return info


def run_paper(cfg: DictConfig, out: Path) -> dict:
    """Run (or resume) every stage of the paper protocol in ``out``; returns what each stage did."""
    from mara.eval.paper_report import write_report

    setup_logging()
    if "paper" not in cfg:
        raise ConfigError("experiment_kind=paper needs a 'paper' block (conf/experiment/paper.yaml)")
    t_start = time.time()
    timings = json.loads((out / "stage_timings.json").read_text()) if (out / "stage_timings.json").exists() else {}
    stages = ["predictor", "trainings", "evaluation", "stress", "prediction", "report"]
    result: dict = {"output_dir": str(out)}

    def stage(i, name):
        log.info(f"== stage {i}/{len(stages)}: {name} · elapsed {fmt_seconds(time.time() - t_start)}")
        return time.time()

    # 1. FM predictor, once
    t = stage(1, "predictor")
    fm_ckpt = cfg.predictor.get("ckpt_path")
    pred_dir = out / "predictor"
    if cfg.paper.get("train_predictor", True) and not fm_ckpt:
        info = _done(pred_dir)
        if not info:
            from mara.predictors.train import train_predictor

            r = train_predictor(_with(cfg, **{"paths.output_dir": str(pred_dir)}))
            info = {"fm_ckpt": r.get("fm_ckpt"), "wall_s": r.get("wall_s"), "val_mae_fm": r.get("val/mae_fm")}
            _mark(pred_dir, info)
        else:
            log.info("predictor: already done, skipped")
        fm_ckpt = info.get("fm_ckpt")
    result["predictor"] = {"fm_ckpt": fm_ckpt}
    _timed(timings, "predictor", t, out)

    # 2. MAT trainings (parallel, resumable per run)
    t = stage(2, "trainings")
    trainings = run_trainings(cfg, out, fm_ckpt)
    result["trainings"] = trainings
    _timed(timings, "trainings", t, out)

    overrides = method_overrides(cfg, trainings)
    methods = list(cfg.paper.methods)
    # 3. evaluation on identical episodes, 4. stress
    t = stage(3, "evaluation")
    result["evaluation"] = _evaluation(cfg, out / "evaluation", methods, overrides, fm_ckpt)
    _timed(timings, "evaluation", t, out)
    t = stage(4, "stress")
    result["stress"] = _evaluation(cfg, out / "stress", methods, overrides, fm_ckpt, scenario=cfg.paper.get("stress_scenario", "stress"))
    _timed(timings, "stress", t, out)
    # 5. prediction benchmark
    t = stage(5, "prediction")
    result["prediction"] = _prediction(cfg, out / "prediction", fm_ckpt)
    _timed(timings, "prediction", t, out)
    # 6. report
    t = stage(6, "report")
    result["report"] = {k: str(v) for k, v in write_report(out, timings=timings).items()}
    _timed(timings, "report", t, out)
    log.info(f"paper protocol: done in {fmt_seconds(time.time() - t_start)} (this invocation); report: {out / 'report.md'}")
    write_text_atomic(out / "train_result.json", json.dumps(result, indent=1, default=str))
    return result


def _timed(timings: dict, name: str, t0: float, out: Path) -> None:
    """Wall time of each stage, summed over invocations (a resumed stage adds only what it did)."""
    timings[name] = timings.get(name, 0.0) + (time.time() - t0)
    write_text_atomic(out / "stage_timings.json", json.dumps(timings, indent=1))
