"""Entry point: ``python -m mara.generate_curves`` (Hydra) -> curve-bank shards and/or the merged bank."""

from __future__ import annotations

import sys
from pathlib import Path

import hydra
from omegaconf import DictConfig, OmegaConf

from mara.calibrate import calibrate_bank
from mara.core.cli import check_group_overrides
from mara.curves.bank import BankError, load_bank, shipped_bank_path
from mara.curves.generation import generate
from mara.curves.merge import merge
from mara.curves.plan import COST_GUESS_S, plan_jobs
from mara.curves.plan_status import plan_status, status_markdown
from mara.curves.plots import plot_bank_grid
from tasks_zoo.errors import ZooError


def run(cfg: DictConfig) -> None:
    """Generate and/or merge as ``cfg.action`` says (the function tests call)."""

    action = cfg.action
    if action not in ("generate", "merge", "all", "ship", "status"):
        raise ZooError(f"unknown action {action!r} (use generate, merge, all, ship or status)")
    if action == "status":
        print(status_markdown(plan_status(planned_jobs(cfg), cfg.shard_dir, COST_GUESS_S), int(cfg.workers)))
        return
    if action == "ship":
        missing = missing_jobs(cfg)
        if missing:
            raise ZooError(
                f"{len(missing)} of the requested curves are not generated yet (first: {missing[0]}); "
                "finish `python -m mara.generate_curves` before shipping the bank"
            )
    if action in ("generate", "all"):
        families = cfg.families if isinstance(cfg.families, str) else list(cfg.families)
        generate(
            families,
            dict(cfg.counts),
            shard_dir=cfg.shard_dir,
            cap=cfg.cap,
            source=cfg.source,
            source_overrides=dict(cfg.source_overrides or {}),
            workers=int(cfg.workers),
            accelerator=cfg.trainer.accelerator,
            devices=int(cfg.trainer.devices),
            data_root=cfg.data_root,
            cache_dir=cfg.cache_dir,
            download=bool(cfg.download),
            max_attempts=int(cfg.max_attempts),
            quiet=bool(cfg.quiet),
            checkpoint_every=int(cfg.get("checkpoint_every", 0) or 0),
        )
    if action in ("merge", "all", "ship"):
        out = merge(
            cfg.shard_dir,
            cfg.bank_path,
            cfg.tensorboard_dir,
            {"request": OmegaConf.to_container(cfg, resolve=True)},
            jobs=planned_jobs(cfg),
        )
        print(f"merged bank written to {out}", file=sys.stderr)
        if cfg.get("calibrate", True):
            res = calibrate_bank(out, float(cfg.get("calibration_target", 0.70)))
            print(
                f"calibrated ε for {len(res['family_params'])} families; Oracle at p=0.04: "
                + ", ".join(f"{k} {v:.1f} %" for k, v in res["oracle"].items()),
                file=sys.stderr,
            )

        print(f"curve plot: {plot_bank_grid(out, Path(out).with_name('curves_by_family.png'))}", file=sys.stderr)
    if action == "ship":
        print(
            f"shipped: {install_bank(out)} is now the package's default bank "
            "(train its FM checkpoint mara/data/checkpoints/fm_zoo.ckpt next, see the README)",
            file=sys.stderr,
        )


def planned_jobs(cfg: DictConfig) -> list:
    """The jobs of the configured plan (families × counts × source)."""

    families = cfg.families if isinstance(cfg.families, str) else list(cfg.families)
    return plan_jobs(families, dict(cfg.counts), cfg.source, dict(cfg.source_overrides or {}))


def missing_jobs(cfg: DictConfig) -> list[str]:
    """Curve ids of the configured plan that have no shard yet."""
    return [j.curve_id for j in planned_jobs(cfg) if not (Path(cfg.shard_dir) / j.shard_name).exists()]


def install_bank(path, max_mib: float = 20.0):
    """Copy a merged, calibrated bank to ``mara/data/banks/zoo.parquet`` (the default from then on)."""
    import shutil

    path = Path(path)
    load_bank(path)  # validates every row before it can become the default
    size = path.stat().st_size / 2**20
    if size > max_mib:
        raise ZooError(f"bank {path} is {size:.1f} MiB, over the {max_mib:g} MiB a shipped bank may take")
    dest = shipped_bank_path("zoo")
    tmp = dest.with_suffix(".parquet.tmp")
    shutil.copyfile(path, tmp)
    tmp.replace(dest)
    return dest


@hydra.main(version_base="1.3", config_path="../conf", config_name="generate_curves")
def _hydra_main(cfg: DictConfig) -> None:
    try:
        run(cfg)
    except (ZooError, BankError) as exc:
        print(f"error: {exc}", file=sys.stderr)
        sys.exit(2)


def main() -> None:
    """The command line: config-group choices are checked first (one line, exit 2), then Hydra composes."""

    check_group_overrides()
    _hydra_main()


if __name__ == "__main__":
    main()
