"""Pre-training the decision head on the LC-PFN prior's curves: the conversion of prior curves into the bank's
loss curves (hand numbers, round trips, the templates' family and scale), their decision examples, and the option
(off by default: the head's training unchanged; on: recorded; bad settings one line, exit 2)."""

from __future__ import annotations

import subprocess
import sys

import numpy as np
import pytest
import torch

from mara.predictors.fit_settings import HeadFitSettings, PriorPretrainSettings
from mara.predictors.qr.data import decision_examples
from mara.predictors.qr.prior_curves import (
    anchored_losses,
    batch_epochs,
    per_batch_losses,
    prior_bank,
)


def test_anchored_losses_hand_numbers():
    y = np.array([[0.2, 0.4, 0.6], [0.1, 0.3, 0.2]])
    L = anchored_losses(y, np.array([2.0, 1.0]), np.array([1.0, 0.5]))
    # row 0: linear rise 0.2 → 0.6 maps onto 2 → 1; row 1: rise 0.1 (total), y = 0.3 overshoots: 1 − 0.5·2 = 0
    assert np.allclose(L, [[2.0, 1.5, 1.0], [1.0, 0.0, 0.5]])


def test_batch_epochs_span_the_prior_horizon():
    x = batch_epochs(700)
    assert x[0] == 1.0 and x[-1] == pytest.approx(100.0) and np.all(np.diff(x) > 0)


def test_per_batch_losses_round_trip():
    L = np.random.default_rng(0).uniform(0.5, 2.0, size=(3, 50))
    ell = per_batch_losses(L)
    assert np.allclose(np.cumsum(ell, axis=1) / np.arange(1, 51), L, rtol=0, atol=1e-12)


def test_prior_bank_takes_family_scale_and_length_from_its_templates(small_bank):
    bank = small_bank
    pb = prior_bank(bank, 64, np.random.default_rng(0))
    train = bank.rows(split="fm_train")
    assert len(pb) == 64 and set(pb.split) == {"fm_train"} and set(pb.family) <= set(bank.family[train])
    assert pb.family_params == bank.family_params
    for i in range(len(pb)):
        n = pb.lengths[i]
        # a template of the same family, batch size, lr and length whose first and last losses the curve shares
        t = [
            r
            for r in train
            if bank.family[r] == pb.family[i]
            and bank.lengths[r] == n
            and bank.batch_size[r] == pb.batch_size[i]
            and bank.lr[r] == pb.lr[i]
            and np.isclose(bank.L[r, 0], pb.L[i, 0])
            and np.isclose(bank.L[r, n - 1], pb.L[i, n - 1])
        ]
        assert t, i
        assert np.all(np.isfinite(pb.L[i, :n])) and np.all(np.isnan(pb.L[i, n:]))
        assert pb.L[i, :n].min() > 0
    # the shapes are the prior's, not the templates': curves of one template differ
    assert len({round(float(pb.L[i, pb.lengths[i] // 2]), 9) for i in range(len(pb))}) > 32


def test_prior_bank_is_deterministic_per_seed(small_bank):
    a = prior_bank(small_bank, 16, np.random.default_rng(5))
    b = prior_bank(small_bank, 16, np.random.default_rng(5))
    c = prior_bank(small_bank, 16, np.random.default_rng(6))
    assert np.array_equal(a.ell, b.ell, equal_nan=True) and not np.array_equal(a.ell, c.ell, equal_nan=True)


def test_prior_curves_give_decision_examples_like_the_bank(small_bank):
    bank = small_bank
    pb = prior_bank(bank, 128, np.random.default_rng(1))
    ex = decision_examples(pb, np.arange(len(pb)), 256, np.random.default_rng(2), bank.family_params, 10)
    assert np.all(np.isfinite(ex.x)) and np.all(np.isfinite(ex.static)) and ex.static.shape[1] == 9
    assert np.all(ex.n_obs >= 4) and np.all(ex.y >= 0) and np.all(ex.y <= np.log1p(ex.cap_left + 1) + 1e-9)
    # ε drawn from the template family's table (a fixed ε ±10 % or a range)
    for f in np.unique(pb.family[ex.rows]):
        p = bank.family_params[f]
        e = ex.eps[pb.family[ex.rows] == f]
        lo, hi = (0.9 * p["eps"], 1.1 * p["eps"]) if "eps" in p else p["eps_range"]
        assert np.all((e >= lo - 1e-12) & (e <= hi + 1e-12)), f


def test_pretrain_settings_default_off_and_checked():
    from omegaconf import OmegaConf

    from mara.core.config import conf_dir

    fit = HeadFitSettings.from_config(OmegaConf.to_container(OmegaConf.load(conf_dir("predictor", "qr.yaml"))))
    assert not fit.pretrain.enabled and fit.pretrain.prior_curves == 0
    assert not PriorPretrainSettings.from_config(None).enabled
    assert PriorPretrainSettings.from_config({"prior_curves": 8}).enabled
    with pytest.raises(ValueError, match="unknown key"):
        PriorPretrainSettings.from_config({"curves": 8})
    with pytest.raises(ValueError, match=">= 0"):
        PriorPretrainSettings.from_config({"prior_curves": -1})


def _tiny_fit(**pretrain) -> HeadFitSettings:
    from mara.predictors.fit_settings import FitSettings

    return HeadFitSettings(
        net={"levels": [0.1, 0.5, 0.9], "gru_hidden": 8, "hidden": 16},
        train_examples=128,
        val_examples=64,
        batch_size=64,
        obs_every=10,
        train=FitSettings(lr=2e-3, weight_decay=0.0, patience=2, max_epochs=1, monitor="val/pinball"),
        pretrain=PriorPretrainSettings(**pretrain),
    )


def _weights(path):
    return torch.load(path, weights_only=True)["state_dict"]


@pytest.mark.usefixtures("one_thread")
def test_option_off_leaves_training_unchanged_and_on_is_recorded(small_bank, tmp_path, monkeypatch):
    from mara.predictors.qr import train as quantile_train

    plain = quantile_train.fit_quantile_head(small_bank, _tiny_fit(), tmp_path / "plain", seed=0)

    def no_prior(*a, **k):
        raise AssertionError("the prior's curves drawn with pre-training off")

    monkeypatch.setattr(quantile_train, "prior_bank", no_prior)
    # prior_curves 0 with other pre-training settings changed: the same head, bit for bit, and the same record
    off = quantile_train.fit_quantile_head(small_bank, _tiny_fit(epochs=3, patience=1), tmp_path / "off", seed=0)
    monkeypatch.undo()
    assert "pretrain" not in plain and set(off) == set(plain)
    wa, wb = _weights(plain["ckpt"]), _weights(off["ckpt"])
    assert all(torch.equal(wa[k], wb[k]) for k in wa)
    on = quantile_train.fit_quantile_head(
        small_bank, _tiny_fit(prior_curves=32, epochs=1, train_examples=128), tmp_path / "on", seed=0
    )
    assert on["pretrain"]["prior_curves"] == 32 and on["pretrain"]["epochs"] == 1
    assert np.isfinite(on["pretrain"]["best_val_pinball"]) and on["cpu_s"] >= 0
    wc = _weights(on["ckpt"])
    assert not all(torch.equal(wa[k], wc[k]) for k in wa)
    assert torch.load(on["ckpt"], weights_only=True)["extra"]["pretrain"]["prior_curves"] == 32


@pytest.mark.parametrize("arg", ["predictor.pretrain.curves=8", "predictor.pretrain.prior_curves=-2"])
def test_bad_pretrain_setting_is_one_line(arg):
    proc = subprocess.run(
        [sys.executable, "-m", "mara.predictors.quantile_train", arg], capture_output=True, text=True, timeout=120
    )
    assert proc.returncode == 2 and proc.stderr.strip().count("\n") == 0 and "predictor.pretrain" in proc.stderr
