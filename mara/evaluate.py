"""``python -m mara.evaluate``: every configured method on identical episodes → results.json / results.md.

Examples::

    python -m mara.evaluate                                   # the shipped MARA, the best rule, FIFO, EDF, bounds
    python -m mara.evaluate methods=[FIFO,EDF] sim.loads=[0.05] eval.roots=2
    python -m mara.evaluate scenario=stress
    python -m mara.evaluate bank.path=/some/bank.parquet
"""

from __future__ import annotations

from pathlib import Path

import hydra
from omegaconf import DictConfig

from mara.core.cli import check_group_overrides, exit_on_error, output_dir, run_cli
from mara.core.config import (
    ConfigError,
    check_method_cfg,
    is_learned,
    load_method_cfg,
    plain_config,
    shipped_policy_checkpoints,
    with_shipped_policies,
)
from mara.core.registry import method, method_files
from mara.core.results import checkpoint_digests, earlier_results, refuse_other_results
from mara.core.rundir import folder_of, run_folder
from mara.core.runlog import Progress, log, setup_logging
from mara.eval.lofo import run_lofo_experiment
from mara.eval.prediction_cli import run_prediction
from mara.eval.runner import build_episodes, evaluate_methods
from mara.eval.settings import EvaluationSettings, bank_at, from_cfg
from mara.mat.allocator import read_policy_meta
from mara.preflight import check_writable, preflight
from mara.preflight.common import run_folder as run_folder_of
from mara.preflight.traces import check_trace_run
from mara.report.results import build_results, write_results
from mara.traces.experiment import run_trace_experiment
from mara.traces.settings import TraceRunSettings, trace_run_settings


def _before_any_work(cfg: DictConfig) -> None:
    kind = cfg.get("experiment_kind")
    if kind == "paper":
        raise ConfigError(
            "experiment=paper trains as well as evaluates: run it as python -m mara.train experiment=paper"
        )
    if kind == "trace_policy":  # nothing to evaluate: the experiment trains a policy
        raise ConfigError(
            "experiment=trace_mara trains MARA's trace policy: run it as python -m mara.train experiment=trace_mara "
            "(its replay: python -m mara.evaluate experiment=trace trace.jobs=target_loss)"
        )
    _own_results_folder(cfg)
    if kind == "trace":  # job traces: the trace file, cluster, windows, schedulers and their checkpoints
        check_trace_run(trace_run_settings_of(cfg))
        folder, where = run_folder_of(cfg)
        if folder is not None:
            check_writable(folder, where)
        return
    for m in cfg.get("methods") or ():
        if isinstance(m, str) and m in method_files() and method(m).trace.only:
            raise ConfigError(f"method {m!r} schedules job traces only: run it with experiment=trace (docs/traces.md)")
    preflight(cfg, "evaluate")


def _own_results_folder(cfg: DictConfig) -> None:
    """A run folder whose results are of the other kind (an evaluation's where a trace replay would write, or the
    reverse) is refused before any work: neither kind writes over the other's rows (``fresh=true`` sets them aside)."""
    if not cfg.get("fresh", False):
        refuse_other_results(folder_of(cfg), "trace" if cfg.get("experiment_kind") == "trace" else "evaluation")


def trace_run_settings_of(cfg: DictConfig) -> TraceRunSettings:
    """The one reading of a trace run's config: the settings it uses, as plain data, typed and checked."""
    return trace_run_settings(
        {k: plain_config(cfg.get(k)) for k in ("trace", "methods", "method_overrides")}
        | {"eval": {k: (cfg.get("eval") or {}).get(k, True) for k in ("tensorboard", "resume")}}
    )


@run_folder(check=_before_any_work)  # one live run per folder; fresh=true sets the folder's earlier results aside
def evaluate(cfg: DictConfig) -> dict:
    """Run the evaluation protocol of ``cfg``; writes results into the run folder and returns them.

    ``results.json`` / ``results.md`` are rewritten (atomically) after every method, so a failure later loses
    nothing; a method that cannot be evaluated is listed under ``skipped`` / ``failed`` with a one-line reason.
    The folder's ``results.json`` merges by method (mara/core/rundir.py): other methods' rows are kept, and with
    ``eval.resume`` (default) so are this run's methods already evaluated there with the same settings.
    """

    setup_logging()
    out = output_dir(cfg)
    if cfg.get("experiment_kind") == "trace":
        res = run_trace_experiment(trace_run_settings_of(cfg), out, log=log.info)
        print(Path(res["paths"]["md"]).read_text())
        log.info(f"wrote {res['paths']['json']} and {res['paths']['md']}")
        return res
    settings = from_cfg(cfg)  # the one reading of the config: every step below gets only the settings it uses
    if settings.kind == "prediction":
        return run_prediction(settings.prediction, settings.evaluation, out)
    if settings.kind == "prediction_lofo":
        return run_lofo_experiment(settings.lofo, out)
    return run_evaluation(settings.evaluation, out)


def run_evaluation(run: EvaluationSettings, out: Path) -> dict:
    """The evaluation protocol of ``run`` in the folder ``out`` (held by the caller): every method on identical
    episodes, ``results.json`` / ``results.md`` rewritten after every method; returns the results."""
    setup_logging()
    protocol, sim = run.protocol, run.sim
    # fail fast on unknown names and on a learned policy given the truth predictor, before any work
    for m in run.methods:
        check_method_cfg(load_method_cfg(m, run.method_overrides.get(m)))
    bank = bank_at(run.bank_path)
    methods, overrides = _methods_to_run(run, bank.path)
    episodes = build_episodes(run.workload, bank, protocol, sim.steps)
    log.info(
        f"evaluate {', '.join(methods)} on {episodes.E} episodes "
        f"({protocol.scenario}: task sets {protocol.task_sets if protocol.scenario != 'stress' else ['stress']}, "
        f"loads {protocol.loads if protocol.scenario != 'stress' else '-'}, roots {protocol.roots}, "
        f"{protocol.episodes} each) "
        f"from {bank.path}"
    )
    base = {"protocol": _recorded_protocol(run), "bank": str(bank.path), "method_overrides": overrides}
    earlier = earlier_results(out / "results.json", base, methods, resume=run.resume)
    digests = checkpoint_digests(overrides)
    title = f"Evaluation ({protocol.scenario})"

    def assemble(rows, notes, timings):
        merged = earlier.merged(
            rows,
            {m: n["reason"] for m, n in notes.items() if n["status"] == "skipped"},
            {m: n["reason"] for m, n in notes.items() if n["status"] == "failed"},
            overrides,
            digests,
        )
        rows = merged.pop("rows")  # the other methods' rows in this folder stay, with their settings
        extra = dict(base, timings=dict(timings), **merged)
        clairvoyant = _clairvoyant_summary(rows, overrides)
        if clairvoyant:
            extra["clairvoyant"] = clairvoyant
        return build_results(rows, extra)

    def checkpoint(rows, notes, timings):  # after every method: what is done is on disk
        write_results(assemble(rows, notes, timings), out, title=title, tensorboard=False, figures=False)

    bars: dict = {}

    def progress(method, fraction):
        bars.setdefault(method, Progress(f"evaluate {method}")).update(fraction)

    rows, timings, notes = evaluate_methods(
        methods,
        episodes,
        bank,
        sim,
        overrides,
        run.predictors,
        progress=progress,
        log=log.info,
        on_method_done=checkpoint,
        done_rows=earlier.done,
    )
    res = assemble(rows, notes, timings)
    paths = write_results(res, out, title=title, tensorboard=run.tensorboard)
    print(Path(paths["md"]).read_text())
    for m, n in notes.items():
        log.warning(f"{m} {n['status']}: {n['reason']}")
    log.info(f"wrote {paths['json']} and {paths['md']}")
    res["paths"] = {k: str(v) for k, v in paths.items()}
    return res


def _methods_to_run(run: EvaluationSettings, bank_path) -> tuple[list[str], dict]:
    """The methods to evaluate and their overrides: a learned method given no checkpoint evaluates the shipped
    policies (and is dropped on a cluster they do not fit)."""
    methods = list(run.methods)
    overrides = dict(run.method_overrides)
    if run.sim.hetero:
        methods = _without_unfit_shipped(methods, overrides, bank_path)  # most shipped policies: identical nodes only
    if run.shipped_policies:  # a learned method given no checkpoint evaluates the shipped policies
        overrides, shipped = with_shipped_policies(methods, overrides, bank_path)
        for m, paths in shipped.items():
            log.info(
                f"{m}: no checkpoint given, evaluating the shipped policies {', '.join(Path(p).name for p in paths)}"
            )
    return methods, overrides


def _recorded_protocol(run: EvaluationSettings) -> dict:
    """The protocol as ``results.json`` records it (what a resumed evaluation must match)."""
    protocol, sim = run.protocol, run.sim
    proto = dict(run.recorded) | {
        "loads": protocol.loads,
        "scenario": protocol.scenario,
        "queue_capacity": sim.queue_capacity,
    }
    if sim.node_speed is not None:  # recorded only when set, so old folders resume
        proto["node_speed"] = list(sim.node_speed)
    if sim.switch_cost not in (0, None):
        proto["switch_cost"] = sim.switch_cost
    return proto


def _clairvoyant_summary(rows: list[dict], overrides: dict) -> dict | None:
    """How the Clairvoyant bound was solved over its rows (None without them): episodes, proven optima, solve time,
    whether it models the admission limit and, on heterogeneous nodes or with switch costs, what its number is."""
    cl = [r for r in rows if r["method"] == "Clairvoyant"]
    if not cl:
        return None
    times = [r["solve_time_s"] for r in cl]
    out = {
        "n_episodes": len(cl),
        "n_optimal": sum(bool(r["optimal"]) for r in cl),
        "solve_time_s": float(sum(times)),
        "max_solve_time_s": float(max(times)),
        "admission_limit": bool(
            load_method_cfg("Clairvoyant", overrides.get("Clairvoyant")).get("admission_limit", True)
        ),
    }
    kinds = sorted({r["bound_kind"] for r in cl if r.get("bound_kind")})
    if kinds:  # heterogeneous nodes / switch costs: what the number is
        out["bound_kind"] = ", ".join(kinds)
    return out


def _without_unfit_shipped(methods: list[str], overrides: dict, bank_path=None) -> list[str]:
    """On heterogeneous nodes / with switch costs a learned method given no checkpoint is dropped with a warning unless
    its shipped policies were trained across clusters (MARA-suite, ``sizes: any``): the others were trained on
    identical nodes (``python -m mara.train experiment=hetero`` trains and evaluates one; or give
    ``+method_overrides.MARA.checkpoints=[...]``)."""
    keep = []
    for m in methods:
        mcfg = load_method_cfg(m, overrides.get(m))
        if is_learned(mcfg) and not mcfg.get("ckpt_path") and not mcfg.get("checkpoints"):
            shipped = shipped_policy_checkpoints(mcfg, bank_path) if bank_path is not None else []
            if not shipped or any(read_policy_meta(c["ckpt_path"])["sizes"] != "any" for c in shipped):
                log.warning(
                    f"skipping {m}: no checkpoint given and the shipped policies were trained on identical "
                    f"nodes (MARA-suite's act on any cluster; python -m mara.train experiment=hetero trains "
                    f"one; or +method_overrides.{m}.checkpoints=[...])"
                )
                continue
        keep.append(m)
    return keep


def all_methods_failed(res: dict | None) -> str | None:
    """The one-line reason when a run produced no result at all: every requested method failed or was skipped."""
    if not res or res.get("rows"):
        return None
    notes = {**(res.get("skipped") or {}), **(res.get("failed") or {})}
    if not notes:
        return None
    return "no method produced a result: " + "; ".join(f"{m}: {why}" for m, why in notes.items())


@hydra.main(version_base="1.3", config_path="../conf", config_name="evaluate")
def _hydra_main(cfg: DictConfig) -> None:
    exit_on_error(all_methods_failed(run_cli(evaluate, cfg)))


def main() -> None:
    """The command line: config-group choices are checked first (one line, exit 2), then Hydra composes."""

    check_group_overrides(config_name="evaluate", check=_before_any_work)  # a multirun: every job checked first
    _hydra_main()


if __name__ == "__main__":
    main()
