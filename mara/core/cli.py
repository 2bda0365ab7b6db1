"""Shared helpers for the thin Hydra entry points: run folder and one-line errors."""
from __future__ import annotations

import sys
import time
from pathlib import Path

from omegaconf import DictConfig

from mara.core.config import CONF_DIR, ConfigError

#: mistakes a user can make in config or data: reported as one line, never a traceback (a bank that cannot be used,
#: ``BankError``, is a ValueError and caught as one below)
USER_ERRORS = (ConfigError, FileNotFoundError)


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


def unknown_group_option(argv: list[str], conf_dir: Path = CONF_DIR) -> str | None:
    """The one-line error for a command-line override that picks a missing option of a config group
    (``experiment=typo`` → "unknown experiment 'typo'; available: ..."), or None when every choice exists.

    Hydra silently ignores a missing option of an ``optional`` group (``experiment``) and raises a multi-line
    error for the others; this check runs before Hydra, for every entry point."""
    for arg in argv:
        if arg.startswith("-") or "=" not in arg:
            continue
        key, value = arg.split("=", 1)
        group = key.lstrip("+~").split("@", 1)[0]
        if not group or "." in group or "/" in group or not (conf_dir / group).is_dir():
            continue
        for choice in value.split(","):  # multirun sweeps: experiment=a,b
            choice = choice.strip()
            if choice in ("", "null") or "(" in choice or "*" in choice:
                continue
            if not (conf_dir / group / f"{choice}.yaml").exists():
                options = sorted(p.stem for p in (conf_dir / group).glob("*.yaml"))
                return f"unknown {group} {choice!r}; available: {', '.join(options)}"
    return None


def check_group_overrides(argv: list[str] | None = None) -> None:
    """Exit with status 2 and one line on stderr if an override names a missing config-group option."""
    msg = unknown_group_option(sys.argv[1:] if argv is None else argv)
    if msg:
        print(f"error: {msg}", file=sys.stderr)
        sys.exit(2)
