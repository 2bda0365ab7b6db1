"""Zoo family configurations (``conf/zoo/<Family>.yaml``) without heavy imports: where they live, which exist.

Besides the package's ``conf/zoo/``, folders named in the environment variable ``MARA_ZOO_CONF`` (``os.pathsep``
separated) are searched, so a family can live outside the repository (see tasks_zoo/README.md, "Adding a family").
"""

from __future__ import annotations

import os
from pathlib import Path

from omegaconf import DictConfig, OmegaConf

from mara.core.config import conf_dir
from tasks_zoo.errors import ZooError

ZOO_CONF_DIR = conf_dir("zoo")
ENV_DIRS = "MARA_ZOO_CONF"


def zoo_conf_dirs() -> list[Path]:
    """The package's conf/zoo, then the folders in $MARA_ZOO_CONF."""
    extra = [Path(p) for p in os.environ.get(ENV_DIRS, "").split(os.pathsep) if p.strip()]
    return [ZOO_CONF_DIR, *extra]


def _paths() -> dict[str, Path]:
    out: dict[str, Path] = {}
    for d in zoo_conf_dirs():
        for p in sorted(d.glob("*.yaml")):
            out.setdefault(p.stem, p)
    return out


def known_families() -> list[str]:
    """Families that have a configuration file."""
    return sorted(_paths())


def load_zoo_config(family: str) -> DictConfig:
    """The Hydra/OmegaConf config of one zoo family; one-line ZooError if unknown."""
    path = _paths().get(family)
    if path is None:
        raise ZooError(f"unknown zoo family {family!r} (known: {', '.join(known_families())})")
    return OmegaConf.load(path)
