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


def at_least(name: str, value, low, error: type[Exception] = ValueError) -> None:
    """Raise ``error("<name> must be >= <low>, got <value>")`` where ``value < low``: one line naming the setting."""
    if value < low:
        raise error(f"{name} must be >= {low}, got {value}")
