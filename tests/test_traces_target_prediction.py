"""The predictor on target-loss trace jobs: hand-worked errors and coverage, the prediction benchmark's section of
them, and the one-line refusals of the command and of the benchmark."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest

from mara.eval.prediction_cli import trace_jobs_section
from mara.eval.settings import trace_job_settings
from mara.traces.schema import SHIPPED_SAMPLE, load_trace
from mara.traces.target_prediction import FRACTIONS, band_metrics

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
        (["--predictors", "fm", "x.csv"], "--predictors must be among qr, wls"),
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


def test_prediction_benchmark_has_the_trace_jobs_section_per_model_and_fraction():

    tj = trace_job_settings({"path": None, "first": 20})  # null: the shipped sample
    data, md = trace_jobs_section(tj)
    models = sorted(set(load_trace(SHIPPED_SAMPLE).model[:20].astype(str)))
    assert "## The predictor on trace jobs" in md and set(data["by_predictor"]) == {"qr", "wls"}
    header = "| model | " + " | ".join(f"{int(f * 100)} %" for f in FRACTIONS) + " |"
    assert md.count(header) == 2  # one table per predictor, one column per observed fraction
    for name, by_f in data["by_predictor"].items():
        assert len(by_f) == len(FRACTIONS)
        assert sum(row["all"]["n"] for row in by_f.values()) > 0
        seen = {m for row in by_f.values() for m in row if m not in ("all", "cold", "cold_metrics")}
        assert seen and seen <= set(models)
        for m in seen:  # a row per model in the table, with a cell per fraction
            line = next(x for x in md.split(f"**{name}**")[1].splitlines() if x.startswith(f"| {m} |"))
            assert line.count("|") == len(FRACTIONS) + 2
        for row in by_f.values():
            for k, x in row.items():
                if k not in ("cold",):
                    assert 0 <= x["coverage"] <= 1 and x["mae_of_n"] >= 0


def test_prediction_benchmark_refuses_a_missing_trace_in_one_line(tmp_path):
    r = subprocess.run(
        [
            sys.executable,
            "-m",
            "mara.evaluate",
            "experiment=prediction",
            f"prediction.trace_jobs.path={tmp_path / 'absent.csv'}",
            f"paths.output_dir={tmp_path / 'run'}",
        ],
        capture_output=True,
        text=True,
        cwd=ROOT,
        env=dict(os.environ, PYTHONPATH=str(ROOT)),
        timeout=300,
    )
    assert r.returncode == 2 and len(r.stderr.strip().splitlines()) == 1, r.stderr
    assert "prediction.trace_jobs.path" in r.stderr and "no such file" in r.stderr
    assert not (tmp_path / "run").exists()  # refused before any work
