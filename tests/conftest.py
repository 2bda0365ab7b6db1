"""Shared fixtures and helpers: small banks that the tests build themselves, a config composed as an entry point
composes it, a Python command run from the repository root."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest
from hydra import compose, initialize_config_dir

from mara.core.config import CONF_DIR
from mara.curves.bank import load_bank, write_bank
from mara.curves.families import ALL_FAMILIES
from mara.curves.parametric import build_parametric_bank

REPO = Path(__file__).resolve().parents[1]


def compose_config(name: str, *overrides: str):
    """``conf/<name>.yaml`` composed with ``overrides`` as the entry point composes it (nothing runs)."""
    with initialize_config_dir(config_dir=str(CONF_DIR), version_base="1.3"):
        return compose(name, overrides=list(overrides))


def run_python(*args: str, timeout: int = 300, cwd=REPO) -> subprocess.CompletedProcess:
    """``python *args`` from the repository root (warnings quiet, one thread), its output as text."""
    env = dict(os.environ, PYTHONWARNINGS="ignore", OMP_NUM_THREADS="1")
    return subprocess.run([sys.executable, *args], cwd=cwd, capture_output=True, text=True, timeout=timeout, env=env)


def linear_records(n_curves: int = 4, length: int = 60, family: str = "CNN_Cifar10", split: str = "pool"):
    """Curves whose per-batch loss is 2 - 0.02 i: cumulative average L(s) = 2 - 0.01 (s + 1)."""
    return [
        {
            "curve_id": f"{family}/{split}/{j}",
            "family": family,
            "split": split,
            "data_source": "synthetic",
            "batch_size": 16,
            "lr": 1e-3,
            "seed": j,
            "losses": 2.0 - 0.02 * np.arange(1, length + 1),
            "meta": {"test": True},
        }
        for j in range(n_curves)
    ]


def lay_out_plugin(tmp_path: Path, monkeypatch, code: dict[str, str], conf: dict[str, str]) -> Path:
    """A user's own modules (``code``: file name -> source) and configs (``conf``: path under the config folder ->
    YAML) written under ``tmp_path``, the config folder on ``MARA_CONF_PATH`` and the code on ``sys.path`` (and the
    subprocesses' ``PYTHONPATH``), as a user adds a method or a predictor without touching the package."""
    import textwrap

    code_dir, conf_dir = tmp_path / "code", tmp_path / "conf"
    for path, text in [(code_dir / n, t) for n, t in code.items()] + [(conf_dir / n, t) for n, t in conf.items()]:
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(textwrap.dedent(text).lstrip())
    monkeypatch.setenv("MARA_CONF_PATH", str(conf_dir))
    monkeypatch.syspath_prepend(str(code_dir))
    monkeypatch.setenv("PYTHONPATH", os.pathsep.join([str(code_dir), str(REPO), os.environ.get("PYTHONPATH", "")]))
    return tmp_path


@pytest.fixture
def linear_bank(tmp_path):
    """A one-family bank of identical linear curves (exact crossings known in closed form)."""
    return load_bank(write_bank(tmp_path / "linear.parquet", linear_records()))


@pytest.fixture(scope="session")
def small_bank(tmp_path_factory):
    """A small calibrated parametric bank with all ten families (8 pool curves each, short caps)."""
    path = tmp_path_factory.mktemp("banks") / "small.parquet"
    build_parametric_bank(path, families=ALL_FAMILIES, counts={"fm_train": 4, "fm_val": 2, "pool": 8}, seed=3)
    return load_bank(path)


@pytest.fixture
def one_thread():
    """Torch on one thread for the test, restored after (used by the zoo-job tests: ``usefixtures("one_thread")``)."""
    import torch

    n = torch.get_num_threads()
    torch.set_num_threads(1)
    yield
    torch.set_num_threads(n)


@pytest.fixture(autouse=True)
def _root_log_handlers_per_test():
    """Entry points add a terminal handler to the root logger on the stderr of the moment; under capsys that stream
    is closed after the test, so a handler a test added is removed with it."""
    import logging

    root = logging.getLogger()
    before = list(root.handlers)
    yield
    for h in [h for h in root.handlers if h not in before]:
        root.removeHandler(h)
