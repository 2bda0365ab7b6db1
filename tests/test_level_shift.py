"""Calibration curves for the families a predictor never trained on (the bank's ``cal`` split): the decision head's
band shifted level by level (predictor qr_q_cal) and fm_cal's per-family offsets from them; the pure functions hold
their levels on fresh draws, leave other families and cold rows alone, and the companion bank is found or refused in
one line."""

from __future__ import annotations

import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq
import pytest

from mara.core.config import ConfigError
from mara.curves.bank import default_bank_path, load_bank, write_bank
from mara.predictors.bands.level_shift import MIN_QUERIES, apply_level_shifts, level_shifts
from mara.predictors.factory import predictor_config, predictor_from
from mara.predictors.prefix import build_queries, cal_bank_path, observe, untrained_cal_queries

LEVELS = (0.05, 0.5, 0.9)


def _biased(rng, n, bias, spread=0.3):
    """A band that is ``bias`` too optimistic in log1p (every level below its nominal share of the truth)."""
    y = rng.uniform(20, 600, n)
    z = np.log1p(y) - bias + rng.normal(0, spread, n)  # the band's centre
    return np.expm1(z[:, None] + np.array([-0.4, 0.0, 0.3])), y


def test_shifted_levels_hold_on_fresh_draws_of_the_same_family():
    rng = np.random.default_rng(0)
    band, y = _biased(rng, 2000, bias=0.6)
    before = (y[:, None] <= band).mean(0)
    assert before[2] < 0.5  # the raw 0.9 level covers far less than 90 %
    shifts = level_shifts(band, y, LEVELS, np.full(len(y), "rl"), np.full(len(y), 5), (10, 20))
    assert np.isfinite(shifts["rl"][0]).all() and np.isnan(shifts["rl"][1:]).all()
    band2, y2 = _biased(rng, 4000, bias=0.6)
    moved = apply_level_shifts(
        band2, np.full(len(y2), "rl"), np.full(len(y2), 5), shifts, (10, 20), np.full(len(y2), 1e9)
    )
    np.testing.assert_allclose((y2[:, None] <= moved).mean(0), LEVELS, atol=0.03)


def test_other_families_cold_rows_and_thin_bins_are_left_alone():
    rng = np.random.default_rng(1)
    band, y = _biased(rng, 200, bias=0.5)
    fam = np.array(["rl"] * 100 + ["vit"] * 100)
    n_obs = np.array([5] * 100 + [5] * (MIN_QUERIES - 1) + [25] * (100 - MIN_QUERIES + 1))
    shifts = level_shifts(band, y, LEVELS, fam, n_obs, (10, 20))
    assert np.isnan(shifts["vit"][0]).all() and np.isfinite(shifts["vit"][2]).all()  # 7 early vit queries: no shift
    rows = np.array([[10.0, 20.0, 30.0], [10.0, 20.0, 30.0], [np.nan] * 3, [10.0, 20.0, 30.0]])
    out = apply_level_shifts(
        rows,
        np.array(["cnn", "vit", "rl", "rl"]),
        np.array([5, 5, 5, 5]),
        shifts,
        (10, 20),
        np.array([1e9, 1e9, 1e9, 35.0]),
    )
    np.testing.assert_array_equal(out[0], rows[0])  # a training family
    np.testing.assert_array_equal(out[1], rows[1])  # a bin too thin to shift
    assert np.isnan(out[2]).all()  # no estimate stays no estimate
    assert (np.diff(out[3]) >= 0).all() and out[3].max() <= 35.0 and out[3][0] > 10.0  # ordered, capped, moved up
    np.testing.assert_array_equal(
        apply_level_shifts(rows, None, np.full(4, 5), shifts, (10, 20), np.full(4, 1e9)), rows
    )


def test_the_companion_bank_is_found_beside_the_bank_or_refused_in_one_line(tmp_path):
    bank = tmp_path / "zoo.parquet"
    assert cal_bank_path(bank, "beside") is None and cal_bank_path(bank, None) is None
    (tmp_path / "zoo_cal.parquet").write_bytes(b"")
    assert cal_bank_path(bank, "beside") == tmp_path / "zoo_cal.parquet"
    with pytest.raises(ConfigError, match="no such file"):
        cal_bank_path(bank, str(tmp_path / "missing.parquet"))


@pytest.fixture(scope="module")
def pool_as_cal(tmp_path_factory):
    """A bank with the shipped bank's table and a companion holding 10 RL pool curves relabelled ``cal`` (a stand-in
    for the shipped companion, so the test does not depend on it)."""
    src = default_bank_path()
    folder = tmp_path_factory.mktemp("banks")
    bank = load_bank(src)
    table = pq.read_table(src)
    rows = bank.rows("RLExpertConfig", "pool")[:10]
    sub = table.take(rows)
    sub = sub.set_column(sub.schema.get_field_index("split"), "split", pa.array(["cal"] * len(rows)))
    (folder / "zoo.parquet").write_bytes(src.read_bytes())
    write_bank(folder / "zoo_cal.parquet", sub, {"note": "test companion"})
    return folder / "zoo.parquet"


def test_the_head_shifts_only_the_families_it_never_trained_on(pool_as_cal):
    bank, cal = load_bank(pool_as_cal), load_bank(pool_as_cal.with_name("zoo_cal.parquet"))
    plain = predictor_from("qr_q", pool_as_cal)
    shifted = predictor_from(predictor_config("qr_q_cal"), pool_as_cal)
    assert set(shifted.shifts) == {"RLExpertConfig"}
    q = untrained_cal_queries(bank, cal)
    rows = q["rows"]
    S, L = observe(cal, rows, q["n_obs"], 10)
    args = (S, L, q["n_obs"], q["eps"], q["cap"], cal.batch_size[rows], cal.lr[rows])
    a, b = (
        plain.predict_quantiles(*args, family=cal.family[rows]),
        shifted.predict_quantiles(*args, family=cal.family[rows]),
    )
    assert not np.allclose(a, b)
    hit = lambda band: (q["truth"][:, None] <= band + 1e-9).mean(0)  # noqa: E731
    assert abs(hit(b)[2] - 0.9) < abs(hit(a)[2] - 0.9)  # the 0.9 level holds better on the curves it was fitted on
    idq = build_queries(bank, ["CNN_Cifar10"], "fm_val", bank.family_params)
    r = idq["rows"]
    S, L = observe(bank, r, idq["n_obs"], 10)
    idargs = (S, L, idq["n_obs"], idq["eps"], idq["cap"], bank.batch_size[r], bank.lr[r])
    np.testing.assert_array_equal(
        plain.predict_quantiles(*idargs, family=bank.family[r]),
        shifted.predict_quantiles(*idargs, family=bank.family[r]),
    )


def test_fm_cal_fits_its_own_offset_for_a_family_with_cal_curves(pool_as_cal):
    with_cal = predictor_from("fm_cal", pool_as_cal)
    cfg = predictor_config("fm_cal")
    cfg.calibration.cal_bank = None
    without = predictor_from(cfg, pool_as_cal)
    assert "RLExpertConfig" in with_cal.offsets and "RLExpertConfig" not in without.offsets
    np.testing.assert_array_equal(with_cal.novel, without.novel)  # the novel-family rule reads training families only
    assert not np.allclose(with_cal.offsets["RLExpertConfig"], without.novel)


def test_the_shipped_calibration_curves_are_not_curves_the_simulator_draws():
    """zoo_cal.parquet: only ``cal`` curves of families without training curves, recorded on real data, none of
    them a pool curve (other seeds), each as long as the family's pool curves."""
    bank = load_bank(default_bank_path())
    path = cal_bank_path(default_bank_path(), "beside")
    assert path is not None
    cal = load_bank(path)
    assert set(np.unique(cal.split)) == {"cal"} and set(np.unique(cal.data_source)) == {"real"}
    for f in np.unique(cal.family):
        assert not len(bank.rows(f, "fm_train")) and f in bank.family_params
        pool, mine = bank.rows(f, "pool"), cal.rows(f, "cal")
        assert len(mine) >= 30
        assert not set(bank.seed[pool]) & set(cal.seed[mine])
        assert set(cal.lengths[mine]) == set(bank.lengths[pool])
