"""The Python call of ``python -m mara.live jobs=<file>``: schedule a user's jobs from a script or notebook."""

from __future__ import annotations

from pathlib import Path

from hydra import compose, initialize_config_dir
from omegaconf import OmegaConf

from mara.core.config import CONF_DIR
from mara.live.run import live_main


def schedule(jobs, overrides=()) -> dict:
    """The Python call of ``python -m mara.live jobs=<file>``: ``jobs`` is a job-file path or a list of job dicts (the
    file's schema); ``overrides`` are the command line's (``sim.nodes=4``, ``live.workers=inline``, ...)."""
    with initialize_config_dir(config_dir=str(CONF_DIR), version_base="1.3"):
        cfg = compose(config_name="live", overrides=list(overrides))
    cfg.jobs = str(jobs) if isinstance(jobs, (str, Path)) else OmegaConf.create({"jobs": list(jobs)})
    return live_main(cfg)
