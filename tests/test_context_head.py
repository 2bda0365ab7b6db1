"""The in-context decision head: family-context features on hand curves, the predictor's band interface, its
checkpoint (one file, several members, loaded as data), the method/predictor configs and the one-line errors."""

from __future__ import annotations

import numpy as np
import pytest
import torch

from mara.core.config import ConfigError, conf_dir, load_method_cfg
from mara.core.safe_load import CheckpointError
from mara.predictors.context_train import settings_from_cli
from mara.predictors.factory import predictor_from
from mara.predictors.prefix import observe
from mara.predictors.qr.head import QuantileNet, save_head
from mara.predictors.qr_ctx.family import N_CONTEXT, FamilyContext, first_below, running_min
from mara.predictors.qr_ctx.head import (
    N_STATIC_CTX,
    ContextHeadPredictor,
    load_context_heads,
    merge_checkpoints,
    save_context_head,
)
from mara.predictors.qr_ctx.train import ContextFitSettings, context_examples


def _power_curves(scales, n=200):
    """Curves L(s) = scale · s^−0.5, s = 1..n: [R, n]."""
    s = np.arange(1, n + 1, dtype=float)
    return np.asarray([a * s**-0.5 for a in scales])


def test_running_min_and_first_below_hand_numbers():
    L = np.array([[3.0, 2.0, 2.5, 1.0, 9.0]])
    env = running_min(L, np.array([4]))
    assert env.tolist() == [[3.0, 2.0, 2.0, 1.0, 1.0]]  # held at its last value past the length
    thr = np.array([[2.0], [1.5], [0.5]])
    assert first_below(env, thr)[:, 0].tolist() == [2, 4, 6]  # 6 = N + 1: never


def test_context_features_read_the_nearest_curves():
    ref = _power_curves([1.0, 2.0, 4.0])
    ctx = FamilyContext({"F": ref}, {"F": np.array([200, 200, 200])}, k=1)
    # a task on the curve of scale 2 observed at batches 10..40, target ε = L(100) of that curve
    s = np.arange(10, 41, 10)
    S, L = s[None, :] * 8.0, 2.0 * s[None, :] ** -0.5
    eps = np.array([2.0 * 100**-0.5])
    f = ctx.features(S, L, np.array([4]), eps, np.array([160.0]), np.array([8]), np.array(["F"]))
    assert f.shape == (1, N_CONTEXT)
    # the nearest curve is the task's own shape: absolute and relative answers are both 100 − 40 = 60 batches
    assert np.expm1(f[0, [0, 1, 2, 3]]) == pytest.approx([60, 60, 60, 60]) and f[0, 5] == 1.0
    # its own curve left out (row 1): the nearest is another scale; a relative answer is still 60 (same shape)
    ctx_rows = FamilyContext({"F": ref}, {"F": np.array([200] * 3)}, k=1, rows={"F": np.array([0, 1, 2])})
    g = ctx_rows.features(S, L, np.array([4]), eps, np.array([160.0]), np.array([8]), np.array(["F"]), np.array([1]))
    assert np.expm1(g[0, 1]) != pytest.approx(60) and np.expm1(g[0, 3]) == pytest.approx(60)
    # ε never reached within the reference curves: censored at cap + 1
    h = ctx.features(S, L, np.array([4]), np.array([1e-3]), np.array([160.0]), np.array([8]), np.array(["F"]))
    assert np.expm1(h[0, 1]) == pytest.approx(161)
    # no family, or a family without reference curves: zeros, "no context"
    for fam in (None, np.array(["G"])):
        z = ctx.features(S, L, np.array([4]), eps, np.array([160.0]), np.array([8]), fam)
        assert np.all(z == 0)


def _ckpt(tmp_path, members=2):
    nets = []
    for seed in range(members):
        torch.manual_seed(seed)
        nets.append(QuantileNet(n_static=N_STATIC_CTX))
    hp = {"levels": nets[0].levels, "gru_hidden": 64, "hidden": 128, "n_static": N_STATIC_CTX}
    return save_context_head(nets, hp, tmp_path / "qr_ctx.ckpt")


def test_predictor_band_interface_and_ensemble(small_bank, tmp_path):
    bank = small_bank
    path = _ckpt(tmp_path)
    assert len(load_context_heads(path)) == 2
    r = np.flatnonzero(bank.split == "fm_val")[:6]
    n = np.array([2, 4, 5, 8, 10, 3])  # two cold tasks
    S, L = observe(bank, r, n, 10)
    cap = (bank.lengths[r] - n * 10).astype(float)
    args = (S, L, n, bank.L[r, 150], cap, bank.batch_size[r], bank.lr[r])
    p = predictor_from({"name": "qr_ctx", "ckpt_path": str(path), "context": {"cal_bank": None}}, bank.path)
    assert isinstance(p, ContextHeadPredictor) and len(p.nets) == 2
    allq = p.all_quantiles(*args, family=bank.family[r])
    band = p.predict_quantiles(*args, family=bank.family[r])
    assert band.shape == (6, 3) and np.array_equal(band, allq[:, [3, 6, 8]])
    assert np.all(np.diff(allq, axis=1) >= 0) and np.all((allq >= 0) & (allq <= cap[:, None]))
    assert np.all(band[[0, 5]] == cap[[0, 5], None])  # cold -> the cap
    # the ensemble averages the members' log quantiles
    one = [ContextHeadPredictor([m], p.context).all_quantiles(*args, family=bank.family[r]) for m in p.nets]
    warm = n >= 4
    inside = np.all([(q[warm] > 0) & (q[warm] < cap[warm, None]) for q in one], axis=0)  # no member clipped
    mean_log = np.mean([np.log1p(q[warm]) for q in one], axis=0)
    assert inside.sum() > 10 and np.allclose(np.log1p(allq[warm])[inside], mean_log[inside], atol=1e-5)
    # the context changes the answer: the same tasks without a family read no context
    assert not np.allclose(p.all_quantiles(*args), allq)


def test_checkpoint_is_checked(tmp_path):
    qr = save_head(QuantileNet(), {"levels": QuantileNet().levels}, tmp_path / "qr.ckpt")
    with pytest.raises(CheckpointError, match="qr_ctx"):
        load_context_heads(qr)
    with pytest.raises(FileNotFoundError, match="context_train"):
        load_context_heads(tmp_path / "missing.ckpt")


def test_training_examples_leave_their_curve_out(small_bank):
    bank = small_bank
    rows = np.flatnonzero(bank.split == "fm_train")
    ctx = FamilyContext.from_banks([(bank, "fm_train")], k=2)
    x, n, st, y = context_examples(bank, ctx, rows, 64, np.random.default_rng(0), 10, drop=0.25, leave_out=True)
    assert st.shape == (64, N_STATIC_CTX) and x.shape[0] == n.shape[0] == y.shape[0] == 64
    has = st[:, -1]
    assert set(np.unique(has)) <= {0.0, 1.0} and 0 < has.mean() < 1  # some examples without context
    assert np.all(st[has == 0, -N_CONTEXT:] == 0)


def test_settings_and_configs():
    training = settings_from_cli(["predictor.context.k=3", "seed=2"])
    fit = training.fit
    assert fit.k == 3 and fit.members == 3 and training.seed == 2 and fit.head.train.monitor == "val/pinball"
    for bad in ({"k": 0}, {"members": "two"}, {"drop": 0.0}):
        with pytest.raises(ConfigError):
            ContextFitSettings.from_config({**_plain_qr_ctx(), "context": bad})
    m = load_method_cfg("Slack-QR-ctx-q")
    from omegaconf import OmegaConf

    pred = OmegaConf.load(conf_dir("predictor", f"{m.predictor}.yaml"))
    kind = OmegaConf.load(conf_dir("predictor", "qr_ctx.yaml"))
    q = m.allocator.quantile
    assert q == m.allocator.band[0] == pred.band[0] and q in kind.net.levels and pred.name == "qr_ctx"
    assert q == load_method_cfg("Slack-QR-q").allocator.quantile  # the decision head's rule, another head


def test_cli_bad_setting_is_one_line(tmp_path):
    from tests.conftest import run_python

    p = run_python("-m", "mara.predictors.context_train", "predictor.context.k=0", f"paths.output_dir={tmp_path}")
    assert p.returncode == 2 and "Traceback" not in p.stderr
    assert len([ln for ln in p.stderr.strip().splitlines() if ln.strip()]) == 1


def _plain_qr_ctx():
    from omegaconf import OmegaConf

    from mara.core.config import plain_config

    return plain_config(OmegaConf.load(conf_dir("predictor", "qr_ctx.yaml")))


def test_blend_averages_the_plain_head_for_trained_families_only(small_bank, tmp_path):
    bank = small_bank
    path = _ckpt(tmp_path, members=1)
    torch.manual_seed(5)
    plain = save_head(QuantileNet(), {"levels": QuantileNet().levels}, tmp_path / "qr.ckpt")
    r = np.flatnonzero(bank.split == "fm_val")[:4]
    n = np.array([4, 6, 8, 10])
    S, L = observe(bank, r, n, 10)
    cap = np.full(4, 10_000.0)  # no clipping: the average is visible in log space
    args = (S, L, n, bank.L[r, 150], cap, bank.batch_size[r], bank.lr[r])
    fam = bank.family[r].astype("<U32")
    fam[2:] = "NotTrained"  # a family without training curves: the in-context head alone
    cfg = {"name": "qr_ctx", "ckpt_path": str(path), "context": {"cal_bank": None}}
    alone = predictor_from(cfg, bank.path).all_quantiles(*args, family=fam)
    blend = predictor_from({**cfg, "blend": {"weight": 0.25, "ckpt": str(plain)}}, bank.path)
    assert blend.trained == set(np.unique(bank.family[bank.split == "fm_train"]))
    mixed = blend.all_quantiles(*args, family=fam)
    from mara.predictors.qr.head import QuantileHeadPredictor

    qp = QuantileHeadPredictor(blend.plain).all_quantiles(*args)
    want = np.expm1(0.75 * np.log1p(alone[:2]) + 0.25 * np.log1p(qp[:2]))
    pos = (alone[:2] > 0) & (qp[:2] > 0)  # neither clipped at 0
    assert pos.sum() > 10 and np.allclose(mixed[:2][pos], want[pos], rtol=1e-4)
    assert np.array_equal(mixed[2:], alone[2:])
    with pytest.raises(ConfigError, match="blend.weight"):
        predictor_from({**cfg, "blend": {"weight": 1.0}}, bank.path)


def test_recalibration_moves_only_the_untrained_families():
    """The shipped head on the shipped bank: qr_ctx_cal shifts the band of the families without training curves
    (fitted on their cal curves, cross-fitted in halves) and leaves the trained families' band as qr_ctx gives it."""
    from mara.curves.bank import default_bank_path, load_bank
    from mara.predictors.prefix import build_queries, query_inputs

    bank = load_bank(default_bank_path())
    plain, cal = predictor_from("qr_ctx", bank.path), predictor_from("qr_ctx_cal", bank.path)
    untrained = {str(f) for f in np.unique(bank.family) if not len(bank.rows(f, "fm_train"))}
    assert set(cal.shifts) == untrained and all(s.shape == (3, 3) for s in cal.shifts.values())
    fams = ["CNN_Cifar10", *sorted(untrained)]
    q = build_queries(bank, fams, "pool", bank.family_params, n_ranks=2)
    args, fam = query_inputs(bank, q), bank.family[q["rows"]]
    a, b = plain.predict_quantiles(*args, family=fam), cal.predict_quantiles(*args, family=fam)
    trained = fam == "CNN_Cifar10"
    assert np.array_equal(a[trained], b[trained]) and not np.allclose(a[~trained], b[~trained])
    assert np.all(np.diff(b, axis=1) >= 0)


def test_merged_checkpoint_holds_every_member(tmp_path):
    a = _ckpt(tmp_path / "a", members=2)
    b = _ckpt(tmp_path / "b", members=1)
    merged = load_context_heads(merge_checkpoints([a, b], tmp_path / "ab.ckpt"))
    parts = load_context_heads(a) + load_context_heads(b)
    assert len(merged) == 3
    for m, p in zip(merged, parts):
        assert all(torch.equal(x, y) for x, y in zip(m.state_dict().values(), p.state_dict().values()))
