"""Fidelity table vs. Table 6: known answers on a linear bank, the shipped bank, the entry point and the plot."""
from __future__ import annotations

import json
import subprocess
import sys

import numpy as np
import pytest

from mara.curves.bank import default_bank_path, load_bank, write_bank
from mara.curves.fidelity import LAST_BATCHES, budget_range, eps_mid, family_fidelity, fidelity_table, to_markdown
from mara.families import ALL_FAMILIES, PAPER_FAMILY_PARAMS
from tests.conftest import linear_records


def test_known_answers_on_a_linear_bank(tmp_path):
    # per-batch loss 2 - 0.02 i (i = 1..60): L(s) = 2 - 0.01 (s + 1); calibrated ε 1.5, paper ε 1.6601, budgets [285, 315]
    path = write_bank(tmp_path / "lin.parquet", linear_records(3, 60),
                      {"family_params": {"CNN_Cifar10": {"eps": 1.5, "budget": [40, 50]}}})
    row = family_fidelity(load_bank(path), "CNN_Cifar10")
    assert row["curves"] == 3 and row["cap"] == 60 and row["data_source"] == "synthetic"
    assert row["eps_calibrated"] == "1.5" and row["eps_paper"] == "1.66"
    assert row["eps_ratio"] == pytest.approx(1.5 / 1.6601, abs=1e-3)
    assert row["budget_calibrated"] == [40, 50] and row["budget_paper"] == [285, 315]
    assert row["final_L"] == pytest.approx(2 - 0.01 * 61, abs=1e-4)
    last = 2 - 0.02 * np.arange(60 - LAST_BATCHES + 1, 61)
    assert row["final_batch_loss"] == pytest.approx(last.mean(), abs=1e-4)
    assert row["L_at_budget"] == pytest.approx(2 - 0.01 * 61, abs=1e-4)  # the curve ends before 315: its last L
    assert row["reach_paper_eps"] == 1.0  # min L = 1.39 <= 1.6601


def test_ood_entries_use_the_geometric_middle():
    assert eps_mid({"eps_range": [1.0, 4.0], "budget_set": [3, 1, 2]}) == pytest.approx(2.0)
    assert budget_range({"eps_range": [1.0, 4.0], "budget_set": [3, 1, 2]}) == (1, 3)


def test_shipped_bank_table_has_every_family():
    bank = load_bank(default_bank_path())
    rows = fidelity_table(bank)
    assert [r["family"] for r in rows] == sorted(ALL_FAMILIES)
    for r in rows:
        assert r["budget_paper"] == list(budget_range(PAPER_FAMILY_PARAMS[r["family"]]))
        assert r["eps_ratio"] > 0 and np.isfinite(r["final_L"]) and r["final_batch_loss"] <= r["final_L"] + 1.0
        assert 0.0 <= r["reach_paper_eps"] <= 1.0
    md = to_markdown(rows)
    assert md.count("\n") == 2 + len(rows) and all(f"| {f} |" in md for f in ALL_FAMILIES)


def test_entry_point_writes_table_json_and_plot(tmp_path):
    p = subprocess.run([sys.executable, "-m", "mara.fidelity", f"out_dir={tmp_path}"], capture_output=True, text=True, timeout=300)
    assert p.returncode == 0, p.stderr
    data = json.loads((tmp_path / "fidelity.json").read_text())
    assert len(data["families"]) == len(ALL_FAMILIES)
    assert "| ALSTM_Text_1 |" in (tmp_path / "fidelity.md").read_text()
    assert (tmp_path / "curves_by_family.png").stat().st_size > 10_000


def test_uncalibrated_bank_is_one_line(tmp_path):
    path = write_bank(tmp_path / "raw.parquet", linear_records(2, 20))
    p = subprocess.run([sys.executable, "-m", "mara.fidelity", f"bank.path={path}", f"out_dir={tmp_path}"],
                       capture_output=True, text=True, timeout=300)
    assert p.returncode == 2 and p.stderr.strip().count("\n") == 0 and "mara.calibrate" in p.stderr
