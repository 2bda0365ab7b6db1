"""Quantile bands, conformal offsets, the prefix-only fallback score, scale-free features and augmentation."""

import numpy as np
import pytest
import torch
from omegaconf import OmegaConf

from mara.curves.bank import default_bank_path, load_bank
from mara.eval.prediction import build_queries
from mara.predictors import predictor_from
from mara.predictors.bands.conformal import apply_offset, band_metrics, conformal_offset
from mara.predictors.baselines.wls import WLSPredictor
from mara.predictors.estimates import predict_band
from mara.predictors.fm.augment import stretch_ell, stretched_bank
from mara.predictors.fm.data import CurveDataModule
from mara.predictors.fm.nets import FlowNet
from mara.predictors.fm.predictor import FlowPredictor, load_net
from mara.predictors.fm.train import compute_novelty
from mara.predictors.prefix import history_features, observe, static_context

torch.set_num_threads(1)
FM_YAML = "conf/predictor/fm.yaml"
# the paper's v1 predictor without a band offset, never retrained (fm_zoo.ckpt is retrained with each new zoo bank)
OLD_CKPT = "mara/data/checkpoints/fm_parametric.ckpt"


def test_conformal_offset_known_answer():
    y = np.expm1(np.array([1.0, 2.0, 3.0, 4.0]))
    zero = np.zeros(4)
    assert conformal_offset(zero, zero, y, coverage=0.5) == pytest.approx(3.0)  # k = ceil(5 · 0.5) = 3rd score
    assert conformal_offset(y, y, y, coverage=0.8) == pytest.approx(0.0)
    # a band that covers with room to spare shrinks (negative offset)
    assert conformal_offset(zero, np.expm1(np.full(4, 10.0)), y, coverage=0.5) < 0
    lo, hi = apply_offset(np.array([10.0]), np.array([20.0]), np.array([30.0]), 0.5, np.array([1000.0]))
    assert lo[0] == pytest.approx(np.expm1(np.log(11.0) - 0.5)) and hi[0] == pytest.approx(np.expm1(np.log(31.0) + 0.5))
    lo, hi = apply_offset(np.array([10.0]), np.array([20.0]), np.array([30.0]), -5.0, np.array([25.0]))
    assert lo[0] == 20.0 and hi[0] == 20.0  # shrinking never excludes the median


def test_stretch_ell_known_answer():
    ell = np.arange(10, dtype=float)[None, :].repeat(2, 0)
    out, n = stretch_ell(ell, np.array([10, 10]), np.array([2.0, 0.5]))
    assert n.tolist() == [5, 10]
    np.testing.assert_array_equal(out[0, :5], [0, 2, 4, 6, 8])
    assert np.isnan(out[0, 5:]).all()
    np.testing.assert_array_equal(out[1], [0, 0, 1, 1, 2, 2, 3, 3, 4, 4])
    bank = load_bank(default_bank_path())
    rows = bank.rows("CNN_Cifar10", "fm_train")[:3]
    sb = stretched_bank(bank, rows, np.array([1.0, 2.0, 0.5]))
    np.testing.assert_allclose(sb.L[0, : bank.lengths[rows[0]]], bank.L[rows[0], : bank.lengths[rows[0]]])
    assert sb.lengths[1] == bank.lengths[rows[1]] // 2 and (sb.family == "CNN_Cifar10").all()


def test_v2_features_are_scale_free_and_v1_are_not():
    S = np.array([[10.0, 20, 30, 40]]) * 16
    L = np.array([[2.0, 1.8, 1.7, 1.65]])
    n = np.array([4])
    for fs, same in (("v2", True), ("v1", False)):
        a = (
            history_features(S, L, n, np.array([16]), fs),
            static_context(np.array([16]), np.array([1e-3]), L[:, -1], np.array([3200.0]), fs),
        )
        b = (
            history_features(S * 4, L * 3, n, np.array([64]), fs),
            static_context(np.array([64]), np.array([1e-3]), 3 * L[:, -1], np.array([12800.0]), fs),
        )
        assert all(np.allclose(x, y) for x, y in zip(a, b)) == same
    with pytest.raises(ValueError):
        FlowNet(feature_set="v9")


def _queries(bank, fams=("CNN_Cifar10", "TSFM_Audio_1", "ALSTM_Text_1")):
    q = build_queries(bank, list(fams), "fm_val", bank.family_params)
    S, L = observe(bank, q["rows"], q["n_obs"])
    return q, (S, L, q["n_obs"], q["eps"], q["cap"], bank.batch_size[q["rows"]], bank.lr[q["rows"]])


def _checks_band(p, args, q):
    band = p.predict_quantiles(*args)
    lo, med, hi = predict_band(p, *args)
    assert band.shape == (len(q["rows"]), 3)
    assert np.all(np.diff(band, axis=1) >= 0), "quantiles must be ordered"
    np.testing.assert_array_equal(med, p.predict_remaining(*args))  # the band contains the point estimate
    assert np.all((lo <= med) & (med <= hi) & (lo >= 0) & (hi <= q["cap"]))
    return band


@pytest.mark.parametrize("fallback", [None, {"threshold": 0.0, "wls_weight": 0.5, "widen": 0.3}])
def test_quantiles_are_ordered_and_contain_the_median(fallback):
    bank = load_bank(default_bank_path())
    q, args = _queries(bank)
    cfg = OmegaConf.load(FM_YAML)
    if fallback:
        cfg.fallback = fallback
    fm = predictor_from(cfg, bank.path)
    band = _checks_band(fm, args, q)
    assert (band[:, 2] > band[:, 0]).mean() > 0.3  # FM's band is not degenerate
    wls = predictor_from(OmegaConf.load("conf/predictor/wls.yaml"))
    _checks_band(wls, args, q)
    cov = band_metrics(band, q["truth"])["coverage"]
    assert 0.0 <= cov <= 1.0


def test_predict_band_degenerate_for_predictors_without_quantiles():
    class Point:
        name = "point"

        def predict_remaining(self, S, L, lengths, eps, cap, bs, lr, family=None):
            return np.asarray(cap, float) / 2

    lo, med, hi = predict_band(Point(), None, None, None, None, np.array([10.0, 4.0]), None, None)
    np.testing.assert_array_equal(lo, [5.0, 2.0]) and np.testing.assert_array_equal(hi, med)


def test_old_checkpoint_still_loads_as_v1():
    net, blob = load_net(OLD_CKPT)
    assert net.feature_set == "v1" and "band_offset" not in blob["extra"]
    fm = FlowPredictor.from_config(OmegaConf.merge(OmegaConf.load(FM_YAML), {"ckpt_path": OLD_CKPT}))
    assert fm.band_offset == 0.0 and fm.novelty is None
    bank = load_bank(default_bank_path())
    q, args = _queries(bank, ("CNN_Cifar10",))
    _checks_band(fm, args, q)


def test_fallback_score_uses_the_prefix_only():
    """Changing everything past each prefix (padding, the future) leaves the score and the band unchanged;
    changing the prefix changes the score (so the check is not vacuous)."""
    bank = load_bank(default_bank_path())
    fams = ["CNN_Cifar10", "TSFM_Audio_1"]
    cfg = OmegaConf.load(FM_YAML)
    cfg.ckpt_path = OLD_CKPT
    cfg.fallback = {"threshold": 0.5, "wls_weight": 0.5, "widen": 0.3}
    fm = FlowPredictor.from_config(cfg)
    d = OmegaConf.to_container(cfg.data, resolve=True) | {
        "train_examples": 512,
        "val_examples": 256,
        "feature_set": fm.net.feature_set,
    }
    fm.novelty = compute_novelty(fm.net, CurveDataModule(bank, families=fams, **d))
    q, (S, L, n, eps, cap, bs, lr) = _queries(bank, fams + ["ALSTM_Text_1"])
    n_full = np.full_like(n, int(n.max()) + 5)
    S_f, L_f = observe(bank, q["rows"], n_full)  # the true future is in the arrays past each length
    pad = np.arange(S_f.shape[1])[None, :] >= n[:, None]
    rng = np.random.default_rng(0)
    S_g, L_g = np.where(pad, rng.uniform(1, 1e6, S_f.shape), S_f), np.where(pad, rng.uniform(1e-3, 5, L_f.shape), L_f)
    scores = [fm.novelty_score(S_, L_, n, cap, bs, lr) for S_, L_ in ((S, L), (S_f, L_f), (S_g, L_g))]
    np.testing.assert_allclose(scores[0], scores[1], atol=1e-6)
    np.testing.assert_allclose(scores[0], scores[2], atol=1e-6)
    bands = [fm.predict_quantiles(S_, L_, n, eps, cap, bs, lr) for S_, L_ in ((S, L), (S_g, L_g))]
    np.testing.assert_allclose(bands[0], bands[1], atol=1e-6)
    assert 0.0 <= scores[0].min() and scores[0].max() <= 1.0
    L_bent = L.copy()
    L_bent[np.arange(len(n)), n - 1] *= 0.5  # a prefix that suddenly halves its loss: unlike the training data
    assert fm.novelty_score(S, L_bent, n, cap, bs, lr).mean() > scores[0].mean()
    # the unseen family scores as more novel than the training families' own fm_val prefixes
    fam = bank.family[q["rows"]]
    assert scores[0][fam == "ALSTM_Text_1"].mean() > scores[0][np.isin(fam, fams)].mean()


def test_wls_band_brackets_its_point_estimate():
    S = np.array([[160.0, 320, 480, 640, 800, 960]])
    L = 3.0 * S**-0.2 * (1 + 0.01 * np.array([[1, -1, 1, -1, 1, -1]]))
    args = (S, L, np.array([6]), np.array([0.5]), np.array([5000.0]), np.array([16]), np.array([1e-3]))
    p = WLSPredictor()
    lo, med, hi = p.predict_quantiles(*args)[0]
    assert lo < med < hi and med == p.predict_remaining(*args)[0]


def test_band_reaches_the_allocators(small_bank):
    """The simulator's observations carry the predictor's band: lo ≤ pred_remaining ≤ hi for every slot."""
    from mara.allocators.rules import FIFO
    from mara.sim.env import BatchedEnv, run_episodes
    from mara.sim.workload import PAPER_TASK_SETS, generate_episodes

    class Recording(FIFO):
        def act(self, obs):
            self.seen.append((obs.pred_remaining_lo, obs.pred_remaining, obs.pred_remaining_hi, obs.present))
            return super().act(obs)

    ep = generate_episodes(small_bank, small_bank.family_params, PAPER_TASK_SETS["ID"], 0.07, 0, 2, n_steps=120)
    for cfg in (OmegaConf.load(FM_YAML), OmegaConf.load("conf/predictor/wls.yaml")):
        alloc = Recording()
        alloc.seen = []
        run_episodes(BatchedEnv(ep, small_bank, predictor=predictor_from(cfg)), alloc)
        lo, med, hi, present = (np.stack(a) for a in zip(*alloc.seen))
        assert np.all(lo <= med) and np.all(med <= hi)
        if cfg.name == "fm":
            assert (hi > lo)[present].any()


#: docs/results.md "Prediction: Table 1", FM v3 rows on the real-data bank
#: (`python -m mara.evaluate experiment=prediction predictors.fm.ckpt_variant=v3`, scripts/ship_real_bank.sh)
TABLE1_V3 = {"ID": (44.10, 0.8915, 0.817), "RL_OOD": (108.62, 0.8143, 0.343), "ViT_OOD": (115.59, 0.8805, 0.698)}


@pytest.mark.slow
def test_shipped_v3_checkpoint_reproduces_table1(tmp_path):
    from mara.eval.prediction import run_prediction_benchmark

    bank = load_bank(default_bank_path())
    cfg = OmegaConf.load(FM_YAML)
    cfg.ckpt_variant = "v3"
    fm = predictor_from(cfg, bank.path)
    assert fm.net.feature_set == "v3" and fm.novelty is not None and fm.band_offset != 0.0
    res = run_prediction_benchmark(
        bank, fm, predictor_from(OmegaConf.load("conf/predictor/wls.yaml")), bank.family_params, tmp_path
    )
    for ts, (mae, acc, cov) in TABLE1_V3.items():
        r = res[ts]["FM"]
        assert r["mae"] == pytest.approx(mae, rel=0.02), ts
        assert r["budget_acc"] == pytest.approx(acc, abs=0.01), ts
        assert r["coverage"] == pytest.approx(cov, abs=0.01), ts
