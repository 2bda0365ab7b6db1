"""The decision head: pinball loss and monotone quantiles on hand numbers, training examples,
the predictor's band interface, the method configs and the one-line config errors."""

from __future__ import annotations

import numpy as np
import pytest
import torch
from omegaconf import OmegaConf

from mara.allocators.slack import band_quantile
from mara.core.config import conf_dir, load_method_cfg
from mara.curves.bank import NEVER
from mara.predictors.factory import predictor_from
from mara.predictors.prefix import observe
from mara.predictors.qr.data import (
    N_STATIC,
    decision_examples,
    decision_inputs,
    remaining_target,
)
from mara.predictors.qr.head import (
    QuantileHeadPredictor,
    QuantileNet,
    default_ckpt_path,
    load_head,
    save_ensemble,
    save_head,
)
from mara.predictors.qr.levels import (
    check_levels,
    level_index,
    monotone_quantiles,
    pinball_loss,
)


def test_pinball_loss_hand_numbers():
    pred = torch.tensor([[1.0, 2.0], [5.0, 5.0]])
    target = torch.tensor([3.0, 4.0])
    # row 0: d = (2, 1) -> 0.1·2 = 0.2, 0.9·1 = 0.9; row 1: d = (−1, −1) -> 0.9·1 = 0.9, 0.1·1 = 0.1
    assert float(pinball_loss(pred, target, [0.1, 0.9])) == pytest.approx((0.2 + 0.9 + 0.9 + 0.1) / 4)
    assert float(pinball_loss(torch.tensor([[3.0]]), torch.tensor([3.0]), [0.3])) == 0.0


def test_pinball_minimiser_is_the_quantile():
    y = torch.arange(1.0, 101.0)  # 1..100
    grid = torch.linspace(0.0, 101.0, 1011)
    for tau, want in ((0.1, 10.0), (0.5, 50.0), (0.9, 90.0)):
        losses = torch.stack([pinball_loss(torch.full((100, 1), float(g)), y, [tau]) for g in grid])
        best = grid[losses == losses.min()]  # a flat minimum between two order statistics
        assert best.min() <= want + 1.0 and best.max() >= want - 1e-6, (tau, best)


def test_monotone_quantiles_hand_numbers():
    raw = torch.tensor([[0.0, 0.0, float(np.log(np.e - 1.0))], [-2.0, -50.0, 3.0]])
    q = monotone_quantiles(raw)
    assert torch.allclose(q[0], torch.tensor([0.0, float(np.log(2.0)), float(np.log(2.0)) + 1.0]))
    assert torch.all(q[:, 1:] >= q[:, :-1])


def test_levels_checked():
    assert check_levels([0.1, 0.5]) == (0.1, 0.5)
    for bad in ([0.5, 0.1], [0.0, 0.5], [0.5, 1.0], [], [0.2, 0.2]):
        with pytest.raises(ValueError, match="strictly increasing"):
            check_levels(bad)
    assert level_index([0.01, 0.1, 0.5, 0.9], [0.1, 0.5, 0.9]) == [1, 2, 3]
    with pytest.raises(ValueError, match=r"\[0\.15\] are not among"):
        level_index([0.01, 0.1, 0.5, 0.9], [0.15, 0.5, 0.9])


def test_remaining_target_hand_numbers():
    y = remaining_target([100, NEVER, 45, 30], [40, 40, 40, 40], [500, 300, 10, 5])
    # 60 left; never reached -> cap_left + 1 = 301; 5 left within a cap of 10; 30 < 40 cannot happen (clipped to 0)
    assert np.allclose(np.expm1(y), [60, 301, 5, 0])


def test_decision_examples_follow_the_workload_and_the_split(small_bank):
    bank = small_bank
    rows = np.flatnonzero(bank.split == "fm_train")
    ex = decision_examples(bank, rows, 500, np.random.default_rng(0), bank.family_params)
    assert set(ex.rows) <= set(rows)  # only the training curves (never pool)
    s0 = ex.n_obs * 10
    need = bank.first_crossing(ex.rows, ex.eps)
    assert np.all(ex.n_obs >= 4) and np.all(s0 < need) and np.all(s0 < bank.lengths[ex.rows])
    assert np.allclose(np.expm1(ex.y), np.minimum(need - s0, bank.lengths[ex.rows] - s0 + 1))
    assert ex.x.shape[0] == ex.static.shape[0] == 500 and ex.static.shape[1] == N_STATIC
    S, L = observe(bank, ex.rows[:7], ex.n_obs[:7], 10)  # the inputs are the simulator's view of the prefix
    x, st = decision_inputs(
        S, L, ex.n_obs[:7], ex.eps[:7], ex.cap_left[:7], bank.batch_size[ex.rows[:7]], bank.lr[ex.rows[:7]]
    )
    assert np.allclose(st, ex.static[:7]) and np.allclose(x, ex.x[:7, : x.shape[1]])


def test_inputs_read_only_the_prefix(small_bank):
    bank = small_bank
    r = np.flatnonzero(bank.split == "fm_train")[:3]
    n = np.array([5, 6, 7])
    S, L = observe(bank, r, n, 10)
    args = (n, bank.L[r, 200], np.full(3, 300), bank.batch_size[r], bank.lr[r])
    x, st = decision_inputs(S, L, *args)
    L2 = L.copy()
    L2[0, 6:] = 123.0  # past row 0's 5 observations (padding): ignored
    x2, st2 = decision_inputs(S, L2, *args)
    assert np.array_equal(x, x2) and np.array_equal(st, st2)


@pytest.fixture
def head_ckpt(tmp_path):
    torch.manual_seed(0)
    net = QuantileNet(levels=(0.02, 0.1, 0.5, 0.9))
    return save_head(net, {"levels": [0.02, 0.1, 0.5, 0.9]}, tmp_path / "qr.ckpt")


def test_predictor_band_interface(small_bank, head_ckpt):
    bank = small_bank
    r = np.flatnonzero(bank.split == "fm_val")[:6]
    n = np.array([2, 4, 5, 8, 10, 3])  # two cold tasks
    S, L = observe(bank, r, n, 10)
    cap = bank.lengths[r] - n * 10
    args = (S, L, n, bank.L[r, 150], cap, bank.batch_size[r], bank.lr[r])
    p = predictor_from({"name": "qr", "ckpt_path": str(head_ckpt), "band": [0.1, 0.5, 0.9]})
    assert isinstance(p, QuantileHeadPredictor)
    allq = p.all_quantiles(*args)
    band = p.predict_quantiles(*args)
    assert band.shape == (6, 3) and np.array_equal(band, allq[:, [1, 2, 3]])
    assert np.array_equal(p.predict_remaining(*args), band[:, 1])
    assert np.all(np.diff(allq, axis=1) >= 0) and np.all((allq >= 0) & (allq <= cap[:, None]))
    assert np.all(band[[0, 5]] == cap[[0, 5], None])  # cold -> the cap
    low = predictor_from({"name": "qr", "ckpt_path": str(head_ckpt), "band": [0.02, 0.5, 0.9]})
    lo, med, hi = low.predict_quantiles(*args).T
    assert np.array_equal(lo, allq[:, 0])
    # the rule's band_quantile at the band's own lower level returns the learned quantile itself
    assert np.allclose(band_quantile(lo, med, hi, 0.02, band=(0.02, 0.9)), lo)


def test_predictor_config_errors(head_ckpt, tmp_path):
    with pytest.raises(ValueError, match="not among the head's trained levels"):
        predictor_from({"name": "qr", "ckpt_path": str(head_ckpt), "band": [0.05, 0.5, 0.9]})
    with pytest.raises(ValueError, match=r"three levels \(lo, 0.5, hi\)"):
        predictor_from({"name": "qr", "ckpt_path": str(head_ckpt), "band": [0.1, 0.9]})
    with pytest.raises(FileNotFoundError, match="quantile_train"):
        load_head(tmp_path / "missing.ckpt")


def test_method_configs_agree():
    m = load_method_cfg("Slack-QR-q")
    pred = OmegaConf.load(conf_dir("predictor", f"{m.predictor}.yaml"))
    head = OmegaConf.load(conf_dir("predictor", "qr.yaml"))
    q = m.allocator.quantile
    assert q == m.allocator.band[0] == pred.band[0] and q in head.net.levels and pred.name == "qr"
    assert load_method_cfg("Slack-QR").predictor == "qr"


def test_cli_bad_band_is_one_line(tmp_path, head_ckpt):
    """A band level the head was not trained at: the method fails with one line and no traceback (the runner's
    per-method failure path, exit 1 "no method produced a result", as for a missing FM checkpoint)."""
    from tests.test_entrypoints import _run

    p = _run(
        "-m",
        "mara.evaluate",
        "methods=[Slack-QR]",
        f"predictors.qr.ckpt_path={head_ckpt}",
        "predictors.qr.band=[0.15,0.5,0.9]",
        "eval.roots=[1000]",
        "eval.episodes=1",
        "sim.loads=[0.04]",
        "eval.task_sets=[ID]",
        "eval.tensorboard=false",
        f"hydra.run.dir={tmp_path}/run",
    )
    assert p.returncode == 1, p.stderr
    lines = [ln for ln in p.stderr.strip().splitlines() if ln.strip()]
    assert len(lines) == 1 and "not among the head's trained levels" in lines[0] and "Traceback" not in p.stderr


def test_ensemble_averages_log_quantiles(small_bank, head_ckpt, tmp_path):
    torch.manual_seed(1)
    other = save_head(QuantileNet(levels=(0.02, 0.1, 0.5, 0.9)), {"levels": [0.02, 0.1, 0.5, 0.9]}, tmp_path / "b.ckpt")
    bank = small_bank
    r = np.flatnonzero(bank.split == "fm_val")[:4]
    n = np.array([4, 6, 9, 12])
    S, L = observe(bank, r, n, 10)
    args = (S, L, n, bank.L[r, 150], np.full(4, 10_000), bank.batch_size[r], bank.lr[r])  # a cap far away: no clipping
    one = [predictor_from({"name": "qr", "ckpt_path": str(p)}).all_quantiles(*args) for p in (head_ckpt, other)]
    both = predictor_from({"name": "qr", "ckpt_path": [str(head_ckpt), str(other)]}).all_quantiles(*args)
    assert np.allclose(both, np.expm1((np.log1p(one[0]) + np.log1p(one[1])) / 2), rtol=1e-5)
    packed = save_ensemble([head_ckpt, other], tmp_path / "ens.ckpt")
    assert np.array_equal(predictor_from({"name": "qr", "ckpt_path": str(packed)}).all_quantiles(*args), both)
    bad = save_head(QuantileNet(levels=(0.1, 0.5, 0.9)), {"levels": [0.1, 0.5, 0.9]}, tmp_path / "c.ckpt")
    with pytest.raises(ValueError, match="same levels"):
        predictor_from({"name": "qr", "ckpt_path": [str(head_ckpt), str(bad)]})


def test_shipped_head_follows_the_bank(tmp_path):
    from mara.curves.bank import default_bank_path, shipped_bank_path

    zoo = default_ckpt_path()
    assert zoo.name == f"qr_{default_bank_path().stem}.ckpt" and zoo.exists()  # the default bank ships its head
    assert default_ckpt_path(default_bank_path()) == zoo
    assert default_ckpt_path(shipped_bank_path("parametric")) == zoo  # no head of its own: the default bank's
    assert default_ckpt_path(tmp_path / "mine.parquet") == zoo
    p = predictor_from("qr")  # conf/predictor/qr.yaml with the shipped head
    assert p.quantiles == (0.1, 0.5, 0.9) and len(p.nets) == 3
