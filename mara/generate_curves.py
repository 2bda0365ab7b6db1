"""Entry point: ``python -m mara.generate_curves`` (Hydra) -> curve-bank shards and/or the merged bank."""
from __future__ import annotations

import sys

import hydra
from omegaconf import DictConfig, OmegaConf

from mara.curves.bank import BankError
from tasks_zoo.errors import ZooError


def run(cfg: DictConfig) -> None:
    """Generate and/or merge as ``cfg.action`` says (the function tests call)."""
    from mara.curves.generation import generate, merge

    action = cfg.action
    if action not in ("generate", "merge", "all"):
        raise ZooError(f"unknown action {action!r} (use generate, merge or all)")
    if action in ("generate", "all"):
        families = cfg.families if isinstance(cfg.families, str) else list(cfg.families)
        generate(families, dict(cfg.counts), shard_dir=cfg.shard_dir, cap=cfg.cap, source=cfg.source,
                 source_overrides=dict(cfg.source_overrides or {}), workers=int(cfg.workers),
                 accelerator=cfg.trainer.accelerator, devices=int(cfg.trainer.devices), data_root=cfg.data_root,
                 cache_dir=cfg.cache_dir, download=bool(cfg.download), max_attempts=int(cfg.max_attempts), quiet=bool(cfg.quiet))
    if action in ("merge", "all"):
        out = merge(cfg.shard_dir, cfg.bank_path, cfg.tensorboard_dir, {"request": OmegaConf.to_container(cfg, resolve=True)})
        print(f"merged bank written to {out}", file=sys.stderr)
        if cfg.get("calibrate", True):
            from mara.calibrate import calibrate_bank

            res = calibrate_bank(out, float(cfg.get("calibration_target", 0.70)))
            print(f"calibrated ε for {len(res['family_params'])} families; Oracle at p=0.04: "
                  + ", ".join(f"{k} {v:.1f} %" for k, v in res["oracle"].items()), file=sys.stderr)


@hydra.main(version_base="1.3", config_path="../conf", config_name="generate_curves")
def main(cfg: DictConfig) -> None:
    try:
        run(cfg)
    except (ZooError, BankError) as exc:
        print(f"error: {exc}", file=sys.stderr)
        sys.exit(2)


if __name__ == "__main__":
    main()
