"""Per-family conformal calibration of the FM band (predictor fm_cal) and the benchmark's per-observation table."""

import numpy as np
import pytest
from omegaconf import OmegaConf

from mara.curves.bank import default_bank_path, load_bank
from mara.eval.prediction import build_queries, by_obs_markdown, metrics_by_obs
from mara.predictors.bands.conformal import apply_offset, band_metrics
from mara.predictors.factory import predictor_from
from mara.predictors.fm.calibrated import calibrate, group_offsets, held_out_family_coverage, novel_offset, offsets_for
from mara.predictors.prefix import observe


def _family_set(rng, n, width):
    """A band [y/e^w, y·e^w]-ish in log1p space whose misses grow with ``width`` (scores spread over [-1, width])."""
    y = rng.uniform(10, 500, n)
    ly = np.log1p(y)
    centre = ly + rng.uniform(-width, width, n)
    return np.expm1(centre - 0.05), np.expm1(centre + 0.05), y


def test_group_offsets_give_the_exact_split_conformal_coverage_per_family_and_bin():
    rng = np.random.default_rng(0)
    parts = {
        ("narrow", 5): _family_set(rng, 49, 0.1),
        ("narrow", 25): _family_set(rng, 39, 0.5),
        ("wide", 5): _family_set(rng, 99, 1.0),
    }
    lo, hi, y = (np.concatenate([p[i] for p in parts.values()]) for i in range(3))
    fam = np.concatenate([[f] * len(p[0]) for (f, _), p in parts.items()])
    n_obs = np.concatenate([[k] * len(p[0]) for (_, k), p in parts.items()])
    offs = group_offsets(lo, hi, y, fam, n_obs, obs_bins=(10, 20), coverage=0.8)
    assert offs["narrow"].shape == (3,) and np.isnan(offs["narrow"][1]) and np.isnan(offs["wide"][1:]).all()
    assert offs["wide"][0] > offs["narrow"][0]
    for (f, k), (l, h, t) in parts.items():
        n = len(t)
        e = offsets_for(np.array([f] * n), np.full(n, k), offs, novel_offset(offs, 3), (10, 20))
        a, b = apply_offset(l, np.sqrt(l * h), h, e, np.full(n, 1e9))
        inside = ((a <= t * (1 + 1e-12)) & (t <= b * (1 + 1e-12))).mean()
        assert inside == pytest.approx(np.ceil((n + 1) * 0.8) / n)  # ⌈(n+1)·0.8⌉ of n scores are ≤ the offset


def test_novel_family_gets_the_widest_known_offset_per_bin():
    offs = {"a": np.array([-0.1, 0.2]), "b": np.array([0.3, np.nan]), "c": np.array([0.05, 0.0])}
    np.testing.assert_array_equal(novel_offset(offs, 2), [0.3, 0.2])
    np.testing.assert_array_equal(novel_offset({}, 2), [0.0, 0.0])
    np.testing.assert_array_equal(novel_offset({"b": np.array([0.3, np.nan])}, 2), [0.3, 0.0])
    novel = novel_offset(offs, 2)
    # rows: c early, unknown family late, a early, b late (b has no late offset: the novel one)
    got = offsets_for(np.array(["c", "zzz", "a", "b"]), np.array([4, 12, 9, 30]), offs, novel, obs_bins=(10,))
    np.testing.assert_array_equal(got, [0.05, 0.2, -0.1, 0.2])
    np.testing.assert_array_equal(offsets_for(None, np.array([4, 12]), offs, novel, (10,)), [0.3, 0.2])


@pytest.fixture(scope="module")
def fm_cal():
    return predictor_from("fm_cal", default_bank_path())


def test_fm_cal_keeps_the_fm_median_and_widens_by_the_family_offset(fm_cal):
    bank = load_bank(default_bank_path())
    q = build_queries(bank, ["CNN_Cifar10", "ALSTM_Text_2"], "fm_val", bank.family_params)
    rows = q["rows"]
    S, L = observe(bank, rows, q["n_obs"])
    n_obs = q["n_obs"].copy()
    n_obs[:3] = 2  # cold rows: the FM answers the cap, fm_cal its cold prior
    args = (S, L, n_obs, q["eps"], q["cap"], bank.batch_size[rows], bank.lr[rows])
    fam = bank.family[rows]
    band = fm_cal.predict_quantiles(*args, family=fam)
    raw = fm_cal.fm.predict_quantiles(*args, family=fam)
    np.testing.assert_array_equal(band[:, 1], fm_cal.predict_remaining(*args, family=fam))
    warm = n_obs >= 4
    np.testing.assert_array_equal(band[warm, 1], raw[warm, 1])
    assert np.all(np.diff(band, axis=1) >= 0) and np.all(band[:, 2] <= q["cap"])
    np.testing.assert_array_equal(raw[:3], np.repeat(q["cap"][:3, None], 3, axis=1))
    np.testing.assert_array_equal(
        band[:3],
        fm_cal.cold.predict_quantiles(S[:3], L[:3], n_obs[:3], q["eps"][:3], q["cap"][:3], args[5][:3], fam[:3]),
    )
    off = offsets_for(fam, n_obs, fm_cal.offsets, fm_cal.novel, fm_cal.obs_bins)
    lo, hi = apply_offset(raw[:, 0], raw[:, 1], raw[:, 2], off + 1e-9, q["cap"])
    np.testing.assert_allclose(band[warm, 0], lo[warm])
    np.testing.assert_allclose(band[warm, 2], hi[warm])


def test_fm_cal_offsets_are_fitted_on_held_out_curves_of_the_training_families_only(fm_cal):
    bank = load_bank(default_bank_path())
    trained = {f for f in np.unique(bank.family) if len(bank.rows(f, "fm_train"))}
    # RL and ViT have no training curves: offsets of their own only from their cal curves (tests/test_level_shift.py)
    assert trained <= set(fm_cal.offsets) and not any(
        len(bank.rows(f, "fm_train")) for f in set(fm_cal.offsets) - trained
    )
    np.testing.assert_array_equal(fm_cal.novel, np.nanmax(np.stack([fm_cal.offsets[f] for f in trained]), axis=0))
    # refitting on the same calibration split reproduces the offsets, and the band then covers ≥ 80 % of it
    refit = calibrate(fm_cal.fm, bank, split="pool", obs_bins=fm_cal.obs_bins)
    assert set(refit) == trained
    for f in trained:
        np.testing.assert_allclose(refit[f], fm_cal.offsets[f])
    fams = sorted(trained)
    q = build_queries(bank, fams, "pool", bank.family_params)
    rows = q["rows"]
    S, L = observe(bank, rows, q["n_obs"])
    band = fm_cal.predict_quantiles(
        S, L, q["n_obs"], q["eps"], q["cap"], bank.batch_size[rows], bank.lr[rows], family=bank.family[rows]
    )
    bins = np.digitize(q["n_obs"], fm_cal.obs_bins)
    for f, b in {(f, b) for f in fams for b in range(len(fm_cal.obs_bins) + 1)}:
        m = (bank.family[rows] == f) & (bins == b)
        n = int(m.sum())
        assert band_metrics(band[m], q["truth"][m])["coverage"] >= np.ceil((n + 1) * 0.8) / n


def test_held_out_family_check_wider_rule_never_covers_less(fm_cal):
    bank = load_bank(default_bank_path())
    cov = held_out_family_coverage(fm_cal.fm, bank, obs_bins_options=((), (10, 20)))
    assert set(cov) == {(r, b) for r in ("pooled", "widest", "upper_quartile", "median") for b in ((), (10, 20))}
    trained = {f for f in np.unique(bank.family) if len(bank.rows(f, "fm_train"))}
    for b in ((), (10, 20)):
        assert set(cov[("widest", b)]) == trained
        for f in trained:  # widest ≥ upper quartile ≥ median of the same offsets: the bands are nested
            assert cov[("widest", b)][f] >= cov[("upper_quartile", b)][f] >= cov[("median", b)][f]


def test_unknown_predictor_name_is_refused():
    from mara.predictors.factory import _build

    with pytest.raises(ValueError, match="fm_cal"):
        _build(OmegaConf.create({"name": "nope"}))


def test_metrics_by_obs_known_answer():
    n_obs = np.array([4, 5, 7, 12, 45])
    err = np.array([10.0, 20.0, 3.0, 4.0, 5.0])
    correct = np.array([True, False, True, True, False])
    qs = np.array([[0, 5, 10], [0, 5, 10], [0, 5, 10], [0, 1, 2], [0, 1, 2]], float)
    truth = np.array([3.0, 11.0, 10.0, 1.0, 9.0])
    out = metrics_by_obs(n_obs, err, correct, qs, truth)
    assert out["4–5"] == {"mae": 15.0, "budget_acc": 0.5, "coverage": 0.5, "n": 2}
    assert out["6–9"] == {"mae": 3.0, "budget_acc": 1.0, "coverage": 1.0, "n": 1}
    assert out["20–39"]["n"] == 0 and np.isnan(out["20–39"]["mae"])
    assert out["≥40"] == {"mae": 5.0, "budget_acc": 0.0, "coverage": 0.0, "n": 1}
    assert metrics_by_obs(n_obs, err, correct, None, truth)["4–5"]["coverage"] is None
    md = by_obs_markdown(
        {"ID": {"FM": {"by_obs": out}, "WLS": {"by_obs": metrics_by_obs(n_obs, err, correct, None, truth)}}}
    )
    assert "| ID | FM | 15 / 50 / 50 (2) | 3 / 100 / 100 (1) |" in md and "| ID | WLS | 15 / 50 / – (2)" in md


def test_cold_prior_known_answer():
    from mara.predictors.bands.cold import ColdPrior

    # three curves of family "a" over 10 batches: constant losses 1.0, 2.0, 4.0 until they drop to 0.1 at batch 3/6/9
    L = np.array([[1.0] * 2 + [0.1] * 8, [2.0] * 5 + [0.1] * 5, [4.0] * 8 + [0.1] * 2])
    prior = ColdPrior({"a": L}, k=2, quantiles=(0.0, 0.5, 1.0))
    bs = np.array([4.0, 4.0, 4.0, 4.0])
    # row 0: one observation at batch 1 with loss 1.9: nearest 2.0 then 1.0 (log 1.9 < log 4/1.9) -> remaining 5 and 2
    # row 1: two observations (batches 1, 4) of loss 4: the 1.0 curve crossed at 3 <= 4 (excluded) -> 9-4=5, 6-4=2
    # row 2: a family with no curves -> cap; row 3: no observation -> the two nearest by index order (all d = 0)
    S = np.array([[4.0, 0.0], [4.0, 16.0], [4.0, 0.0], [0.0, 0.0]])
    Lh = np.array([[1.9, 0.0], [4.0, 4.0], [1.0, 0.0], [0.0, 0.0]])
    q = prior.predict_quantiles(
        S, Lh, np.array([1, 2, 1, 0]), np.full(4, 0.5), np.array([100, 100, 7, 4]), bs, np.array(["a", "a", "zzz", "a"])
    )
    np.testing.assert_allclose(q[0], [2.0, 3.5, 5.0])
    np.testing.assert_allclose(q[1], [2.0, 3.5, 5.0])
    np.testing.assert_allclose(q[2], [7.0, 7.0, 7.0])
    np.testing.assert_allclose(q[3], [3.0, 3.5, 4.0])  # remaining 3 and 6 capped at 4
    np.testing.assert_array_equal(
        prior.predict_quantiles(S, Lh, np.array([1, 2, 1, 0]), np.full(4, 0.5), np.full(4, 9), bs, None),
        np.full((4, 3), 9.0),
    )


def test_cold_queries_and_fm_cal_cold_estimates(fm_cal):
    from mara.eval.prediction import build_cold_queries

    bank = load_bank(default_bank_path())
    q = build_cold_queries(bank, ["CNN_Cifar10", "RLExpertConfig"], "pool", bank.family_params, obs=(1, 3))
    assert set(np.unique(q["n_obs"])) <= {1, 3} and np.all(q["first"] > 10 * q["n_obs"])
    rows = q["rows"]
    S, L = observe(bank, rows, q["n_obs"])
    args = (S, L, q["n_obs"], q["eps"], q["cap"], bank.batch_size[rows], bank.lr[rows])
    fam = bank.family[rows]
    band = fm_cal.predict_quantiles(*args, family=fam)
    med = fm_cal.predict_remaining(*args, family=fam)
    np.testing.assert_array_equal(band[:, 1], med)
    novel = fam == "RLExpertConfig"  # no training curves: the cap, as without the cold prior
    np.testing.assert_array_equal(band[novel], np.repeat(q["cap"][novel, None], 3, axis=1))
    known = ~novel
    np.testing.assert_array_equal(
        band[known], fm_cal.cold.predict_quantiles(*[a[known] for a in args[:5]], args[5][known], fam[known])
    )
    assert (band[known, 1] < q["cap"][known]).mean() > 0.5  # informative, not the cap


@pytest.mark.parametrize("override", ["calibration.split=valid", "cold.split=training"])
def test_a_wrong_split_is_one_clear_config_error(override):
    from mara.core.config import ConfigError
    from mara.predictors.factory import predictor_config

    cfg = OmegaConf.merge(predictor_config("fm_cal"), OmegaConf.from_dotlist([override]))
    with pytest.raises(ConfigError, match="is not a bank split"):
        predictor_from(cfg, default_bank_path())
