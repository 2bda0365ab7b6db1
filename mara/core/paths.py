"""Where the package's configs and shipped data are, and the one-line ``ConfigError`` every layer raises."""

from __future__ import annotations

from pathlib import Path

PACKAGE_DIR = Path(__file__).resolve().parents[1]
CONF_DIR = PACKAGE_DIR.parent / "conf"
SHIPPED_BANKS_DIR = PACKAGE_DIR / "data" / "banks"


def conf_dir(*parts: str) -> Path:
    """The Hydra config folder ``conf/`` (beside the package), or a path inside it: ``conf_dir("predictor",
    "fm.yaml")``. Every module finds ``conf/`` through this function."""
    return CONF_DIR.joinpath(*parts)


class ConfigError(ValueError):
    """A configuration mistake, reported as one line by the entry points."""
