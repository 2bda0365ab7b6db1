"""Decision-relevant prediction metrics (finish decisions by observations, slack Spearman), by hand."""

from __future__ import annotations

import numpy as np
import pytest

from mara.eval.decision_metrics import (
    decision_markdown,
    decision_metrics,
    finish_scores,
    rankdata,
    spearman,
)


def test_rankdata_and_spearman_hand_cases():
    assert rankdata([3, 1, 2, 2]).tolist() == [4.0, 1.0, 2.5, 2.5]
    assert spearman([1, 2, 3], [3, 2, 1]) == pytest.approx(-1.0)
    assert spearman([1, 5, 7], [10, 11, 100]) == pytest.approx(1.0)  # monotone, not linear
    # ties: ranks (1, 2.5, 2.5, 4) vs (1, 2, 3, 4): 4.5 / √(4.5 · 5) = 0.948683
    assert spearman([1, 2, 2, 3], [1, 2, 3, 4]) == pytest.approx(0.948683, abs=1e-6)
    assert np.isnan(spearman([1, 1, 1], [1, 2, 3]))


def test_finish_scores_hand_case():
    got = finish_scores([True, True, False, True], [True, False, True, False])
    assert got == {"acc": 0.25, "false_hopeless": 0.5, "false_finishable": 1.0, "n": 4}
    assert np.isnan(finish_scores([True], [True])["false_finishable"])  # no truly hopeless query


def test_decision_metrics_hand_case():
    s0, budget = [40, 40, 100, 100], [200, 200, 200, 200]
    first = [150, 250, 180, 400]
    truth = [110, 210, 80, 300]
    n_obs = [4, 4, 10, 10]
    pred = [120, 150, 120, 90]  # tau = 160, 160, 100, 100 -> predicted finishable T, T, F, T; truth T, F, T, F
    m = decision_metrics(s0, budget, first, truth, n_obs, pred)
    assert m["acc"] == 0.25 and m["false_hopeless"] == 0.5 and m["false_finishable"] == 1.0
    assert m["by_obs"]["4–5"] == {"acc": 0.5, "false_hopeless": 0.0, "false_finishable": 1.0, "n": 2}
    assert m["by_obs"]["10–19"]["acc"] == 0.0 and m["by_obs"]["10–19"]["n"] == 2
    assert m["by_obs"]["≥40"]["n"] == 0
    # slack ranks: predicted (40, 10, −20, 10) -> (4, 2.5, 1, 2.5); true (50, −50, 20, −200) -> (4, 2, 3, 1)
    assert m["slack_spearman"] == pytest.approx(1.5 / np.sqrt(22.5))
    perfect = decision_metrics(s0, budget, first, truth, n_obs, truth)
    assert perfect["acc"] == 1.0 and perfect["slack_spearman"] == pytest.approx(1.0)
    md = decision_markdown({"ID": {"FM median": m}})
    assert "| FM median | 25.0 | 50.0 (2) |" in md and "| 50.0 | 100.0 | 0.316 |" in md


def test_benchmark_reports_decisions(tmp_path, small_bank):
    from omegaconf import OmegaConf

    from mara.eval.prediction import TASK_SETS, build_queries, decision_results
    from mara.predictors.factory import predictor_from

    wls = predictor_from(OmegaConf.create({"name": "wls", "gamma": 0.9, "ridge": 1e-10, "min_obs": 4}))
    fams, split = TASK_SETS["ID"]
    q = build_queries(
        small_bank, [f for f in fams if len(small_bank.rows(f, split))], split, small_bank.family_params, 4
    )
    res = decision_results(wls, wls, small_bank, q, quantiles=(0.05,))  # WLS in both roles: any predictor with a band
    assert {"FM median", "FM q10", "FM q90", "FM q0.05", "WLS median", "WLS q10"} <= set(res)
    assert (
        res["FM median"]["acc"] == res["WLS median"]["acc"]
        and res["FM median"]["slack_spearman"] == res["WLS median"]["slack_spearman"]
    )
    for r in res.values():
        assert 0.0 <= r["acc"] <= 1.0 and r["n"] == len(q["rows"])
        assert sum(b["n"] for b in r["by_obs"].values()) == r["n"]  # every query is warm (≥ 4 observations)


def test_extra_predictors_get_rows_of_their_own(tmp_path, small_bank, monkeypatch):
    from omegaconf import OmegaConf

    import mara.eval.prediction as prediction
    from mara.eval.prediction import by_obs_markdown, run_prediction_benchmark, table1_markdown
    from mara.predictors.factory import predictor_from

    monkeypatch.setattr(prediction, "_figure", lambda *a, **k: [])  # Figure 3 samples the FM's futures; WLS has none

    wls = predictor_from(OmegaConf.create({"name": "wls", "gamma": 0.9, "ridge": 1e-10, "min_obs": 4}))
    other = predictor_from(OmegaConf.create({"name": "wls", "gamma": 0.5, "ridge": 1e-10, "min_obs": 4}))
    res = run_prediction_benchmark(
        small_bank, wls, wls, small_bank.family_params, tmp_path, n_ranks=4, extra=(("WLS-0.5", other),)
    )
    ts = next(iter(res))
    assert [m for m in res[ts] if m not in ("decision", "cold")] == ["FM", "WLS", "WLS-0.5"]
    assert res[ts]["WLS-0.5"]["n_queries"] == res[ts]["WLS"]["n_queries"]
    assert res[ts]["WLS-0.5"]["mae"] != res[ts]["WLS"]["mae"]  # scored with its own setting, on the same queries
    assert {"WLS-0.5 median", "WLS-0.5 q0.1", "WLS-0.5 q0.9"} <= set(res[ts]["decision"])
    assert f"| {ts} | WLS-0.5 |" in table1_markdown(res) and f"| {ts} | WLS-0.5 |" in by_obs_markdown(res)


def test_band_levels_are_scored_against_the_truth_and_drawn(tmp_path, monkeypatch):
    from mara.eval.prediction import evaluate_predictor, reliability_figure

    class Band:  # a fixed band whose levels hold on 1 / 4, 2 / 4 and 4 / 4 of the queries
        quantiles = (0.1, 0.5, 0.9)

        def predict_remaining(self, S, L, n, eps, cap, bs, lr, family=None):
            return np.full(len(n), 20.0)

        def predict_quantiles(self, S, L, n, eps, cap, bs, lr, family=None):
            return np.tile([10.0, 20.0, 40.0], (len(n), 1))

    class Bank:
        batch_size = lr = np.ones(4)
        family = np.array(["a"] * 4)

    import mara.predictors.prefix as queries

    q = {
        "rows": np.arange(4),
        "n_obs": np.full(4, 5),
        "eps": np.ones(4),
        "cap": np.full(4, 99.0),
        "truth": np.array([5.0, 15.0, 30.0, 40.0]),
        "budget": np.full(4, 100),
        "first": np.full(4, 90),
        "rank": np.zeros(4, int),
    }
    monkeypatch.setattr(queries, "observe", lambda bank, rows, n, every: (np.zeros((4, 5)), np.zeros((4, 5))))
    res, _ = evaluate_predictor(Band(), Bank(), q, n_ranks=1)
    assert res["levels"] == [0.1, 0.5, 0.9] and res["level_hits"] == [0.25, 0.5, 1.0]
    assert res["coverage"] == 0.75
    path = reliability_figure({"ID": {"X": res, "decision": {}}}, tmp_path)
    assert path and (tmp_path / "fig_calibration.png").stat().st_size > 0
    assert reliability_figure({"ID": {"WLS": {"mae": 1.0}}}, tmp_path / "none") is None


def test_decision_points_with_the_truth_are_perfect(small_bank):
    """At the simulator's decision points the truth predictor's estimate is the truth: every decision right."""
    from mara.allocators.slack import SlackRule
    from mara.eval.decision_points import (
        collect_decision_points,
        decision_point_metrics,
    )
    from mara.predictors.baselines.truth import TruthPredictor
    from mara.sim.env import BatchedEnv
    from mara.sim.workload import PAPER_TASK_SETS, generate_episodes

    eps = generate_episodes(small_bank, small_bank.family_params, PAPER_TASK_SETS["ID"], 0.07, 1003, 4)
    pts = collect_decision_points(
        BatchedEnv(eps, small_bank, predictor=TruthPredictor()), SlackRule(), quantiles=(0.05,)
    )
    assert len(pts["tau"]) > 100 and set(pts) >= {"median", "q10", "q90", "q0.05"}
    assert np.all(pts["n_obs"] >= 4)
    np.testing.assert_allclose(pts["median"], pts["truth"])
    m = decision_point_metrics(pts)
    for name in ("median", "q10", "q90", "q0.05"):
        assert m[name]["acc"] == 1.0 and m[name]["slack_spearman"] == pytest.approx(1.0, abs=1e-3)  # float ties
    assert 0 < np.mean(pts["truth"] <= pts["tau"]) < 1  # both kinds of decision occur


def test_decision_points_from_config(tmp_path, small_bank):
    from mara.eval.decision_points import decision_points
    from mara.eval.settings import from_cfg
    from tests.test_entrypoints import tiny

    cfg = tiny(
        tmp_path,
        small_bank.path,
        "experiment=prediction",
        "eval.task_sets=[ID]",
        "prediction.decision_points.loads=[0.07]",
        "~prediction.decision_points.policies.FM",
    )
    settings = from_cfg(cfg)
    out = decision_points(settings.prediction.decision_points, settings.evaluation)
    assert out["_meta"]["n_episodes"] == 2 and set(out) == {"WLS", "_meta"}
    assert {"median", "q10", "q90"} <= set(out["WLS"]) and 0 <= out["WLS"]["median"]["acc"] <= 1
