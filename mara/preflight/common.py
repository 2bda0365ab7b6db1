"""What every check before any work shares: one-line messages, the closest valid name, a setting read from the
composed config, and the run folder (writable, without leaving a probe behind)."""

from __future__ import annotations

import difflib
import os
from pathlib import Path

from omegaconf import DictConfig, OmegaConf

from mara.core.config import ConfigError
from mara.curves.bank import default_bank_path, shipped_bank_path


def _first_line(exc: BaseException) -> str:
    text = str(exc).strip()
    return text.splitlines()[0] if text else type(exc).__name__


def closest(word: str, choices) -> str:
    """`` (did you mean 'x'?)`` for the closest of ``choices`` to a misspelt ``word``, else an empty string."""
    match = difflib.get_close_matches(str(word), [str(c) for c in choices], n=1, cutoff=0.6)
    return f" (did you mean {match[0]!r}?)" if match else ""


def _select(cfg: DictConfig, key: str):
    try:
        return OmegaConf.select(cfg, key, default=None)
    except Exception:  # an interpolation that does not resolve is reported by the stage that reads it
        return None


def _named(setting: str, check, *args) -> None:
    """``check(*args)``, its one-line ConfigError prefixed with the setting it is about when it does not name it."""
    try:
        check(*args)
    except ConfigError as exc:
        msg = _first_line(exc)
        raise ConfigError(msg if msg.startswith(setting) else f"{setting}: {msg}") from None


def check_writable(folder, where: str) -> None:
    """``folder`` can take files: a probe file is created and removed, and folders created for it are removed."""
    folder = Path(str(folder))
    created, p = [], folder
    while not p.exists() and p != p.parent:
        created.append(p)
        p = p.parent
    try:
        folder.mkdir(parents=True, exist_ok=True)
        probe = folder / f".write_probe_{os.getpid()}"
        probe.write_bytes(b"")
        probe.unlink()
    except OSError as exc:
        raise ConfigError(f"{where} {folder} is not writable ({exc.strerror or type(exc).__name__})") from None
    finally:
        for d in created:  # deepest first
            try:
                d.rmdir()
            except OSError:
                break


def run_folder(cfg: DictConfig) -> tuple[Path | None, str]:
    """(the run folder the entry point will write, the setting that names it); None when neither is set."""
    given = (cfg.get("paths") or {}).get("output_dir")
    if given:
        return Path(str(given)), "paths.output_dir"
    try:
        from hydra.core.hydra_config import HydraConfig

        return Path(HydraConfig.get().runtime.output_dir), "hydra.run.dir"
    except Exception:  # composed outside @hydra.main (tests, notebooks): a fresh folder is made later
        return None, ""


def _bank_path(cfg: DictConfig):
    """The bank a run reads: ``bank.path`` (a path or a shipped name), else the default bank."""
    path = (cfg.get("bank") or {}).get("path")
    return shipped_bank_path(path) if path else default_bank_path()
