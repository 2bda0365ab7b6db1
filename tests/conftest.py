"""Shared fixtures: small banks that the tests build themselves."""
from __future__ import annotations

import numpy as np
import pytest

from mara.curves.bank import load_bank, write_bank
from mara.curves.families import ALL_FAMILIES
from mara.curves.parametric import build_parametric_bank


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
