"""``python -m mara.evaluate``: every configured method on identical episodes → results.json / results.md.

Examples::

    python -m mara.evaluate                                   # FIFO, EDF, Oracle, Clairvoyant, full protocol
    python -m mara.evaluate methods=[FIFO,EDF] sim.loads=[0.05] eval.roots=2
    python -m mara.evaluate scenario=stress
    python -m mara.evaluate bank.path=/some/bank.parquet
"""
from __future__ import annotations

from pathlib import Path

import hydra
from omegaconf import DictConfig, OmegaConf

from mara.cli import output_dir, run_cli


def evaluate(cfg: DictConfig) -> dict:
    """Run the evaluation protocol of ``cfg``; writes results into the run folder and returns them."""
    from rich.console import Console

    from mara.eval.methods import load_method_cfg
    from mara.eval.report import build_results, write_results
    from mara.eval.runner import build_episodes, evaluate_methods, load_bank_from_cfg, protocol_from_cfg

    console = Console(stderr=True)
    out = output_dir(cfg)
    if cfg.get("experiment_kind") == "prediction":
        from mara.eval.prediction_cli import run_prediction

        return run_prediction(cfg, out)
    if cfg.get("experiment_kind") == "prediction_lofo":
        from mara.eval.lofo import run_lofo_experiment

        return run_lofo_experiment(cfg, out)
    protocol = protocol_from_cfg(cfg)
    methods = list(cfg.methods)
    for m in methods:  # fail fast on unknown names, before any work
        load_method_cfg(m)
    bank = load_bank_from_cfg(cfg)
    episodes = build_episodes(cfg, bank, protocol)
    console.print(
        f"[bold]evaluate[/] {', '.join(methods)} on {episodes.E} episodes "
        f"({protocol.scenario}: task sets {protocol.task_sets if protocol.scenario != 'stress' else ['stress']}, "
        f"loads {protocol.loads if protocol.scenario != 'stress' else '-'}, roots {protocol.roots}, {protocol.episodes} each) "
        f"from {bank.path}"
    )
    rows, timings = evaluate_methods(methods, episodes, bank, cfg, log=lambda s: console.print(s))
    extra = {"timings": timings, "protocol": OmegaConf.to_container(cfg.eval, resolve=True) | {"loads": protocol.loads, "scenario": protocol.scenario}, "bank": str(bank.path)}
    cl = [r for r in rows if r["method"] == "Clairvoyant"]
    if cl:
        times = [r["solve_time_s"] for r in cl]
        extra["clairvoyant"] = {
            "n_episodes": len(cl),
            "n_optimal": sum(bool(r["optimal"]) for r in cl),
            "solve_time_s": float(sum(times)),
            "max_solve_time_s": float(max(times)),
            "admission_limit": bool(load_method_cfg("Clairvoyant", (cfg.get("method_overrides") or {}).get("Clairvoyant")).get("admission_limit", True)),
        }
    res = build_results(rows, extra)
    paths = write_results(res, out, title=f"Evaluation ({protocol.scenario})", tensorboard=bool(cfg.eval.get("tensorboard", True)))
    console.print(Path(paths["md"]).read_text())
    console.print(f"[green]wrote[/] {paths['json']} and {paths['md']}")
    res["paths"] = {k: str(v) for k, v in paths.items()}
    return res


@hydra.main(version_base="1.3", config_path="../conf", config_name="evaluate")
def main(cfg: DictConfig) -> None:
    run_cli(evaluate, cfg)


if __name__ == "__main__":
    main()
