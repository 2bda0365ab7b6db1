"""Calibration: per-family ε so that independent feasibility hits the target."""

import shutil
import subprocess
import sys

import numpy as np
import pytest

from mara.calibrate import calibrate_bank, oracle_rates
from mara.curves.bank import load_bank
from mara.curves.calibrate import calibrate_family_params, sample_eps_budget
from mara.curves.families import PAPER_FAMILY_PARAMS


@pytest.mark.parametrize("target", [0.5, 0.7])
def test_family_rates_hit_target(small_bank, target):
    params = calibrate_family_params(small_bank, PAPER_FAMILY_PARAMS, target=target, n_samples=4000)
    rng = np.random.default_rng(99)  # fresh draws, independent of the calibration's own
    for fam, p in params.items():
        rows = small_bank.rows(fam, "pool")
        pick = rows[rng.integers(0, len(rows), 4000)]
        eps, budget = sample_eps_budget(p, rng, 4000)
        need = small_bank.first_crossing(pick, eps)
        assert abs(np.mean(need <= budget) - target) < 0.04, fam


def test_calibrate_bank_in_place(tmp_path, small_bank):
    path = tmp_path / "b.parquet"
    shutil.copy(small_bank.path, path)
    res = calibrate_bank(path, target=0.7, n_samples=4000)
    bank = load_bank(path)
    assert bank.family_params == res["family_params"]
    assert set(res["oracle"]) == {"ID", "RL_OOD", "ViT_OOD"}
    for rate in oracle_rates(bank, bank.family_params, roots=range(200, 240)).values():
        assert 65.0 < rate < 75.0


def test_cli_calibrate(tmp_path, small_bank):
    path = tmp_path / "c.parquet"
    shutil.copy(small_bank.path, path)
    p = subprocess.run(
        [sys.executable, "-m", "mara.calibrate", f"bank.path={path}", "target=0.6"], capture_output=True, text=True
    )
    assert p.returncode == 0, p.stderr
    assert "Oracle at p=0.04, ID" in p.stdout
    assert load_bank(path).bank_meta["calibration_target"] == 0.6
