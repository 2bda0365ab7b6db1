"""The gap decomposition (allocation gap, prediction gap, share closed, learned − best rule), by hand."""

from __future__ import annotations

import pytest

from mara.report.decomposition import (
    decomposition_markdown,
    gap_decomposition,
    paired_difference,
    share_closed,
)
from mara.report.results import build_results, results_markdown


def _rows(method, rates, seed=None, load=0.05):
    return [
        {
            "method": method,
            "task_set": "ID",
            "load": load,
            "root": 0,
            "train_seed": seed,
            "episode": e,
            "success_rate": r,
        }
        for e, r in enumerate(rates)
    ]


def hand_rows():
    return (
        _rows("Clairvoyant", [0.8, 0.6])
        + _rows("Slack-Truth", [0.7, 0.6])
        + _rows("Slack-WLS", [0.5, 0.4])
        + _rows("Slack-FM", [0.6, 0.5])
        + _rows("MARA", [0.6, 0.5], seed=0)
        + _rows("MARA", [0.7, 0.5], seed=1)
        + _rows("Oracle", [0.9, 0.9])
    )


def test_hand_computed_decomposition():
    d = gap_decomposition(hand_rows())["0.05"]
    # Clairvoyant − Slack-Truth per episode: 10, 0 -> 5 ± std(10, 0)/√2 = 5
    assert d["allocation_gap"]["diff"] == pytest.approx(5.0) and d["allocation_gap"]["se"] == pytest.approx(5.0)
    # Slack-Truth − Slack-FM: 10, 10; − MARA (seed mean 65, 50): 5, 10 -> 7.5 ± 2.5
    assert d["prediction_gap"]["Slack-FM"]["diff"] == pytest.approx(10.0) and d["prediction_gap"]["Slack-FM"]["se"] == 0
    assert d["prediction_gap"]["MARA"]["diff"] == pytest.approx(7.5) and d["prediction_gap"]["MARA"][
        "se"
    ] == pytest.approx(2.5)
    assert "Oracle" not in d["prediction_gap"] and "Clairvoyant" not in d["prediction_gap"]
    # share of the WLS -> truth gap: FM (10, 10) / (20, 20) = 0.5; MARA (15, 10) / (20, 20) = 0.625 ± √(12.5/(400·2))
    assert d["share_closed"]["Slack-FM"]["share"] == pytest.approx(0.5) and d["share_closed"]["Slack-FM"][
        "se"
    ] == pytest.approx(0)
    assert d["share_closed"]["MARA"]["share"] == pytest.approx(0.625) and d["share_closed"]["MARA"][
        "se"
    ] == pytest.approx(0.125)
    # best rule: Slack-FM (55) over Slack-WLS (45); bounds and Slack-Truth excluded; MARA − Slack-FM: 5, 0
    assert d["best_rule"] == "Slack-FM"
    assert d["minus_best_rule"]["MARA"]["diff"] == pytest.approx(2.5) and d["minus_best_rule"]["MARA"][
        "se"
    ] == pytest.approx(2.5)


def test_share_closed_delta_method_with_covariance():
    # d1 = 1, 2, 3; d2 = 2, 2, 5: r = 2/3; var = (1 − 2·(2/3)·1.5 + (4/9)·3) / (3² · 3) = 1/81 -> se 1/9
    low = {0: 0.0, 1: 0.0, 2: 0.0}
    got = share_closed({0: 1.0, 1: 2.0, 2: 3.0}, low, {0: 2.0, 1: 2.0, 2: 5.0})
    assert got["share"] == pytest.approx(2 / 3) and got["se"] == pytest.approx(1 / 9) and got["n"] == 3
    assert share_closed({0: 1.0, 1: 1.0}, {0: 1.0, 1: 1.0}, {0: 1.0, 1: 1.0}) is None  # no gap to close
    assert paired_difference({0: 1.0}, {1: 1.0}) is None  # no shared episode


def test_only_parts_whose_methods_are_there():
    assert gap_decomposition(_rows("FIFO", [0.5, 0.4]) + _rows("Clairvoyant", [0.6, 0.6])) == {}
    d = gap_decomposition(_rows("Slack-FM", [0.5, 0.4]) + _rows("Slack-Truth", [0.6, 0.6]))["0.05"]
    assert (
        "allocation_gap" not in d
        and "share_closed" not in d
        and d["prediction_gap"]["Slack-FM"]["diff"] == pytest.approx(15)
    )


def test_report_shows_the_decomposition():
    res = build_results(hand_rows())
    assert res["decomposition"]["0.05"]["best_rule"] == "Slack-FM"
    md = results_markdown(res)
    assert "## Gap decomposition" in md
    assert "| allocation gap (Clairvoyant − Slack-Truth) | +5.00 ± 5.00 |" in md
    assert "| prediction gap of MARA (Slack-Truth − MARA) | +7.50 ± 2.50 |" in md
    assert "| Slack-FM | 50.0 ± 0.0 % |" in md
    assert "| MARA − best rule | +2.50 ± 2.50 |" in md
    assert decomposition_markdown({}) == []
