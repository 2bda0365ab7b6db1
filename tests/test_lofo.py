"""Leave-one-family-out benchmark: a held-out family's curves never reach training or validation."""

import numpy as np
import pytest
import torch
from omegaconf import OmegaConf

from mara.curves.bank import default_bank_path, load_bank, records_to_table, write_bank
from mara.eval.lofo import lofo_families, lofo_summary, run_lofo
from mara.eval.settings import LofoSettings
from mara.predictors.fm.data import CurveDataModule
from mara.predictors.fm.train import seen_families

torch.set_num_threads(1)
FAMS = ("CNN_Cifar10", "TSFM_Audio_1", "ALSTM_Text_1")


@pytest.fixture(scope="module")
def lofo_bank(tmp_path_factory):
    """6 fm_train + 2 fm_val + 2 pool curves of three ID families, cut from the shipped bank."""
    bank = load_bank(default_bank_path())
    rows = np.concatenate(
        [
            np.concatenate([bank.rows(f, "fm_train")[:6], bank.rows(f, "fm_val")[:2], bank.rows(f, "pool")[:2]])
            for f in FAMS
        ]
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
    path = tmp_path_factory.mktemp("lofo") / "three.parquet"
    write_bank(path, records_to_table(recs), bank.bank_meta)
    return load_bank(path)


def small_fm_cfg():
    pc = OmegaConf.load("conf/predictor/fm.yaml")
    pc.data.val_examples, pc.data.batch_size, pc.data.stretch_p = 128, 128, 0.5
    return pc


def test_datamodule_families_filter_every_example(lofo_bank):
    d = OmegaConf.to_container(small_fm_cfg().data, resolve=True) | {"train_examples": 256}
    dm = CurveDataModule(lofo_bank, families=["CNN_Cifar10", "ALSTM_Text_1"], **d)
    assert seen_families(dm) == ["ALSTM_Text_1", "CNN_Cifar10"]
    for epoch in range(3):  # augmented (time-stretched) examples too
        b, ex = dm.train_examples_for_epoch(epoch)
        assert set(b.family[ex.rows]) <= {"CNN_Cifar10", "ALSTM_Text_1"}
    # the detector is not vacuous: without the filter the third family shows up
    assert "TSFM_Audio_1" in seen_families(CurveDataModule(lofo_bank, **d))


def test_lofo_never_trains_or_validates_on_the_held_out_family(lofo_bank, tmp_path):
    assert lofo_families(lofo_bank) == ["CNN_Cifar10", "TSFM_Audio_1", "ALSTM_Text_1"]
    wls = OmegaConf.load("conf/predictor/wls.yaml")
    settings = LofoSettings(fm=small_fm_cfg(), wls=wls, max_epochs=1, train_examples=256, n_ranks=4)
    res = run_lofo(lofo_bank, settings, tmp_path, log=lambda s: None)
    for held in FAMS:
        seen = res["training"][held]["seen_families"]
        assert held not in seen and set(seen) == set(FAMS) - {held}
        assert res["folds"][held]["test_families"] == [held]
        assert res["folds"][held]["FM"]["n_queries"] > 0 and 0 <= res["folds"][held]["FM"]["coverage"] <= 1
        assert (tmp_path / f"fold_{held}" / "fm.ckpt").exists()
    s = lofo_summary(res["folds"])
    assert s["n_folds"] == 3 and 0 <= s["fm_wins"] <= 3
    assert "FM beats WLS on MAE" in (tmp_path / "lofo.md").read_text()
    # evaluation-only rerun from the saved fold checkpoints gives the same numbers
    settings = LofoSettings(fm=small_fm_cfg(), wls=wls, reuse_dir=str(tmp_path), n_ranks=4)
    again = run_lofo(lofo_bank, settings, tmp_path / "again", log=lambda s: None)
    assert again["summary"] == pytest.approx(s)
