"""Validation metrics under DDP: two CPU gloo processes, each scoring its share, reduce to the one-process values
(FM module's MAE / budget accuracy / band coverage on real bank queries; MAT's mean validation success rate)."""

from __future__ import annotations

import json
from pathlib import Path
from types import SimpleNamespace

import numpy as np
import pytest
import torch
import torch.distributed as dist
import torch.multiprocessing as mp
from omegaconf import OmegaConf
from torchmetrics import MeanMetric

from mara.curves.bank import default_bank_path, load_bank
from mara.predictors.baselines.wls import WLSPredictor
from mara.predictors.fm.data import val_queries
from mara.predictors.fm.module import FlowPredictorModule
from mara.predictors.fm.val_metrics import rank_share

FM_YAML = Path(__file__).resolve().parents[1] / "conf" / "predictor" / "fm.yaml"
SUCCESS = np.array([0.5, 0.25, 1.0, 0.75, 0.0, 0.5, 0.125])  # 7 episodes: shares of 4 and 3


def _module_and_data(world_size: int, rank: int):
    """An (untrained, seeded) FM module attached to a stand-in trainer, and the validation queries of the bank's
    fm_val curves of two families."""
    torch.manual_seed(0)
    net = OmegaConf.to_container(OmegaConf.load(FM_YAML).net, resolve=True)
    module = FlowPredictorModule(net, obs_every=10)
    module._trainer = SimpleNamespace(global_rank=rank, world_size=world_size)
    bank = load_bank(default_bank_path())
    rows = np.concatenate([bank.rows(f, "fm_val")[:3] for f in ("CNN_Cifar10", "TSFM_Audio_1")])
    dm = SimpleNamespace(bank=bank, val_q=val_queries(bank, rows, 5, seed=2), seed=0)
    return module, dm


def _scores(module, dm) -> dict:
    fm = module._score(module.predictor(), dm, module.val_fm)
    wls = module._score(WLSPredictor(), dm, module.val_wls)
    success = MeanMetric().set_dtype(torch.float64)  # as mara.mat.callback.ValidationCallback uses it
    share = rank_share(len(SUCCESS), module.global_rank, module.trainer.world_size)
    success.update(torch.as_tensor(SUCCESS[share]))
    return {"fm": fm, "wls": wls, "success": float(success.compute()), "n_queries": len(dm.val_q[0])}


def _worker(rank: int, world_size: int, tmp: str) -> None:
    torch.set_num_threads(1)
    dist.init_process_group("gloo", init_method=f"file://{tmp}/store", rank=rank, world_size=world_size)
    try:
        module, dm = _module_and_data(world_size, rank)
        out = _scores(module, dm)
        out["share"] = len(rank_share(len(dm.val_q[0]), rank, world_size))
        Path(tmp, f"rank{rank}.json").write_text(json.dumps(out))
    finally:
        dist.destroy_process_group()


@pytest.mark.ddp
def test_two_gloo_ranks_reduce_to_the_single_process_metrics(tmp_path):
    torch.set_num_threads(1)
    single = _scores(*_module_and_data(1, 0))
    assert single["n_queries"] >= 9 and single["success"] == pytest.approx(SUCCESS.mean())
    mp.spawn(_worker, args=(2, str(tmp_path)), nprocs=2, join=True)
    ranks = [json.loads((tmp_path / f"rank{r}.json").read_text()) for r in range(2)]
    assert ranks[0]["share"] + ranks[1]["share"] == single["n_queries"] and ranks[1]["share"] > 0
    for out in ranks:  # every rank logs the reduced value, equal to the one-process one
        for key in ("fm", "wls"):
            assert out[key] == pytest.approx(single[key], rel=1e-9, abs=1e-12), key
        assert out["success"] == pytest.approx(single["success"], rel=1e-12)
    # not a mean of the per-rank means (shares of 4 and 3 episodes)
    assert single["success"] != pytest.approx((SUCCESS[0::2].mean() + SUCCESS[1::2].mean()) / 2)


def test_single_process_mae_is_the_hand_computed_one():
    from mara.predictors.fm.data import remaining_mae

    module, dm = _module_and_data(1, 0)
    fm = module._score(module.predictor(), dm, module.val_fm)
    assert fm["mae"] == pytest.approx(remaining_mae(module.predictor(), dm.bank, dm.val_q), rel=1e-12)
    wls = module._score(WLSPredictor(), dm, module.val_wls)
    assert wls["mae"] == pytest.approx(remaining_mae(WLSPredictor(), dm.bank, dm.val_q), rel=1e-12)
    assert 0.0 <= fm["budget_acc"] <= 1.0 and 0.0 <= fm["coverage"] <= 1.0
