"""Flow predictor end to end on tiny configs: determinism, training lowers MAE, protocol/config, 2-process DDP."""

import subprocess
import sys

import numpy as np
import pytest
import torch
from omegaconf import OmegaConf

from mara.curves.bank import default_bank_path, load_bank, records_to_table, write_bank
from mara.predictors import RemainingPredictor, predictor_from
from mara.predictors.fm.data import CurveDataModule, remaining_mae
from mara.predictors.fm.module import FlowPredictorModule
from mara.predictors.fm.predictor import FlowPredictor, default_ckpt_path, load_net
from mara.predictors.fm.train import train_predictor
from mara.predictors.prefix import observe, true_remaining
from mara.train_settings import predictor_training

torch.set_num_threads(1)
FM_YAML = "conf/predictor/fm.yaml"
TINY_FAMILIES = ("CNN_Cifar10", "TSFM_Audio_1")


@pytest.fixture(scope="module")
def tiny_bank_path(tmp_path_factory):
    """8 fm_train + 3 fm_val curves of two ID families, cut from the shipped bank."""
    bank = load_bank(default_bank_path())
    rows = np.concatenate(
        [np.concatenate([bank.rows(f, "fm_train")[:8], bank.rows(f, "fm_val")[:3]]) for f in TINY_FAMILIES]
    )
    recs = [
        dict(
            curve_id=bank.curve_id[r],
            family=bank.family[r],
            split=bank.split[r],
            data_source=bank.data_source[r],
            batch_size=int(bank.batch_size[r]),
            lr=float(bank.lr[r]),
            seed=int(bank.seed[r]),
            losses=bank.ell[r, : bank.lengths[r]],
            meta=bank.meta[r],
        )
        for r in rows
    ]
    path = tmp_path_factory.mktemp("bank") / "tiny.parquet"
    write_bank(path, records_to_table(recs), bank.bank_meta)
    return path


def tiny_cfg(bank_path, out_dir, max_epochs=6, **trainer):
    pred = OmegaConf.load(FM_YAML)
    pred.data.train_examples = 2048
    pred.data.val_examples = 256
    pred.data.batch_size = 128
    pred.train.figure_every_n_epochs = 3
    pred.train.patience = 100
    return OmegaConf.create(
        {
            "seed": 0,
            "bank": {"path": str(bank_path)},
            "predictor": pred,
            "paths": {"output_dir": str(out_dir)},
            "trainer": {
                "max_epochs": max_epochs,
                "accelerator": "cpu",
                "devices": 1,
                "enable_progress_bar": False,
                **trainer,
            },
        }
    )


def test_training_on_tiny_bank_lowers_val_mae(tiny_bank_path, tmp_path):
    cfg = tiny_cfg(tiny_bank_path, tmp_path)
    bank = load_bank(tiny_bank_path)
    dm = CurveDataModule(bank, seed=0, **OmegaConf.to_container(cfg.predictor.data, resolve=True))
    torch.manual_seed(0)
    untrained = FlowPredictorModule(OmegaConf.to_container(cfg.predictor.net), stats=dm.stats).predictor()
    mae_before = remaining_mae(untrained, bank, dm.val_q)
    result = train_predictor(predictor_training(cfg))
    net, blob = load_net(result["fm_ckpt"])
    mae_after = remaining_mae(FlowPredictor(net), bank, dm.val_q)
    assert mae_after < mae_before, (mae_before, mae_after)
    assert (tmp_path / "tensorboard").exists()
    assert np.isfinite(result["val/mae_wls"])


def test_same_prefix_same_estimate_and_protocol(tiny_bank_path):
    cfg = OmegaConf.load(FM_YAML)
    if not default_ckpt_path().exists():
        pytest.skip("no shipped checkpoint")
    fm = predictor_from(cfg)
    wls = predictor_from(OmegaConf.load("conf/predictor/wls.yaml"))
    assert isinstance(fm, RemainingPredictor) and isinstance(wls, RemainingPredictor)
    bank = load_bank(tiny_bank_path)
    rows = bank.rows(split="fm_val")
    n_obs = np.array([2, 4, 9, 15, 20, 30])[: len(rows)]
    S, L = observe(bank, rows, n_obs)
    eps = bank.L[rows, n_obs * 10 + 100] * 1.001
    _, cap = true_remaining(bank, rows, n_obs, eps)
    args = (S, L, n_obs, eps, cap, bank.batch_size[rows], bank.lr[rows])
    for p in (fm, wls):
        a, b = p.predict_remaining(*args), p.predict_remaining(*args)
        np.testing.assert_array_equal(a, b)
        assert a[0] == cap[0]  # fewer than 4 observations -> the remaining cap
        assert np.all((a >= 0) & (a <= cap))
    # the same prefix inside a different batch gives the same estimate
    single = fm.predict_remaining(*(x[2:3] for x in args))
    np.testing.assert_allclose(single, fm.predict_remaining(*args)[2:3], atol=1.0)
    # NaN padding past each length is ignored
    pad = np.arange(S.shape[1])[None, :] >= n_obs[:, None]
    nan_args = (np.where(pad, np.nan, S), np.where(pad, np.nan, L)) + args[2:]
    for p in (fm, wls):
        np.testing.assert_array_equal(p.predict_remaining(*nan_args), p.predict_remaining(*args))
    # per-family override (A.2): ViT runs 4 samples / 1 step
    assert fm.per_family["ViT_Cifar10_1"] == (4, 1)
    vit = fm.predict_remaining(*args, family=np.array(["ViT_Cifar10_1"] * len(rows)))
    assert np.all((vit >= 0) & (vit <= cap))


@pytest.mark.ddp
def test_ddp_two_process_cpu_training(tiny_bank_path, tmp_path):
    cfg = tiny_cfg(tiny_bank_path, tmp_path, max_epochs=1, devices=2, strategy="ddp")
    cfg.predictor.data.train_examples = 512
    cfg_path = tmp_path / "cfg.yaml"
    OmegaConf.save(cfg, cfg_path)
    proc = subprocess.run(
        [sys.executable, "-m", "mara.predictors.train", str(cfg_path)], capture_output=True, text=True
    )
    assert proc.returncode == 0, proc.stderr[-3000:]
    assert (tmp_path / "fm.ckpt").exists()
    load_net(tmp_path / "fm.ckpt")


def test_shipped_checkpoint_follows_the_bank(tmp_path, monkeypatch):
    """``ckpt_path: null`` -> the FM trained on the bank in use (fm_<bank>.ckpt), else the default bank's."""
    from mara.curves import bank as bank_mod
    from mara.curves.bank import shipped_bank_path
    from mara.predictors.fm import predictor as fm_mod

    ckdir = fm_mod.Path(fm_mod.__file__).resolve().parents[2] / "data" / "checkpoints"
    assert fm_mod.default_ckpt_path(shipped_bank_path("parametric")) == ckdir / "fm_parametric.ckpt"
    assert fm_mod.default_ckpt_path(tmp_path / "parametric.parquet") == ckdir / f"fm_{default_bank_path().stem}.ckpt"
    assert fm_mod.default_ckpt_path().exists()  # the default bank ships its own FM
    monkeypatch.setattr(bank_mod, "default_bank_path", lambda: tmp_path / "zoo.parquet")
    assert fm_mod.default_ckpt_path(tmp_path / "other.parquet") == ckdir / "fm_zoo.ckpt"
    assert fm_mod.default_ckpt_path(shipped_bank_path("parametric")) == ckdir / "fm_parametric.ckpt"
