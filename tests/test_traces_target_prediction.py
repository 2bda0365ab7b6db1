"""The predictor on target-loss trace jobs: hand-worked errors and coverage, and the command's one-line refusals."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest

from mara.traces.target_prediction import band_metrics

ROOT = Path(__file__).resolve().parents[1]


def test_band_metrics_are_worked_by_hand():
    est = np.array([[50.0, 100.0, 200.0], [10.0, 20.0, 30.0]])
    left, total = np.array([150.0, 40.0]), np.array([300.0, 80.0])
    m = band_metrics(est, left, total)
    # |100 - 150| / 300 = 1/6, |20 - 40| / 80 = 1/4; relative 50/150 = 1/3 and 20/40 = 1/2; only job 0 is covered
    assert m["mae_of_n"] == pytest.approx((1 / 6 + 1 / 4) / 2)
    assert m["median_rel"] == pytest.approx((1 / 3 + 1 / 2) / 2)
    assert m["coverage"] == 0.5 and m["n"] == 2


@pytest.mark.parametrize(
    "args, needle",
    [
        (["mara/data/traces/itp_cluster01_first300_raw.csv"], "elasticflow schema"),
        (["--predictors", "fm", "x.csv"], "--predictors must be qr and/or wls"),
    ],
)
def test_bad_arguments_are_refused_in_one_line(args, needle):
    r = subprocess.run(
        [sys.executable, "-m", "mara.traces.target_prediction", *args],
        capture_output=True,
        text=True,
        cwd=ROOT,
        env=dict(os.environ, PYTHONPATH=str(ROOT)),
        timeout=300,
    )
    assert r.returncode == 2 and len(r.stderr.strip().splitlines()) == 1 and needle in r.stderr, r.stderr
