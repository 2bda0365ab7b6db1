"""Shared helpers for the thin Hydra entry points: run folder and one-line errors."""
from __future__ import annotations

import sys
import time
from pathlib import Path

from omegaconf import DictConfig

from mara.curves.bank import BankError
from mara.eval.methods import ConfigError

#: mistakes a user can make in config or data: reported as one line, never a traceback
USER_ERRORS = (ConfigError, BankError, FileNotFoundError)


def output_dir(cfg: DictConfig) -> Path:
    """The run folder: ``paths.output_dir`` if set, else Hydra's run dir, else a fresh outputs/ folder."""
    given = (cfg.get("paths") or {}).get("output_dir")
    if given:
        out = Path(given)
    else:
        try:
            from hydra.core.hydra_config import HydraConfig

            out = Path(HydraConfig.get().runtime.output_dir)
        except Exception:  # composed outside @hydra.main (tests, notebooks)
            out = Path("outputs") / str(cfg.get("task_name", "run")) / time.strftime("%Y-%m-%d_%H-%M-%S")
    out.mkdir(parents=True, exist_ok=True)
    return out


def run_cli(fn, cfg: DictConfig):
    """Call ``fn(cfg)``; configuration and data mistakes exit with status 2 and one line on stderr."""
    try:
        return fn(cfg)
    except USER_ERRORS as exc:
        print(f"error: {exc}", file=sys.stderr)
        sys.exit(2)
    except ValueError as exc:  # bad values reaching the simulator or workload generator
        print(f"error: {exc}", file=sys.stderr)
        sys.exit(2)
