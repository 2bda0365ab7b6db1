"""LC-PFN written from its paper: the prior, the bar distribution, the PFN's attention, the crossing read-out, the
predictor built through the factory, resumable training; and our prior against the ``lcpfn`` package's where it
imports (the project never depends on it)."""

from __future__ import annotations

import importlib.util
import math
import subprocess
import sys

import numpy as np
import pytest
import torch

from mara.predictors.factory import predictor_config, predictor_from
from mara.predictors.lcpfn.data import (
    bank_batch,
    batch_nll,
    normalise_prefix,
    prior_batch,
)
from mara.predictors.lcpfn.net import BarDistribution, PFNTransformer, prior_borders
from mara.predictors.lcpfn.predictor import crossing_quantiles
from mara.predictors.lcpfn.prior import accepted, ilog2, janoschek, pow3, sample_curves


def _ks(a, b) -> float:
    """Two-sample Kolmogorov–Smirnov statistic."""
    a, b = np.sort(a), np.sort(b)
    z = np.concatenate([a, b])
    return float(np.abs(np.searchsorted(a, z, "right") / len(a) - np.searchsorted(b, z, "right") / len(b)).max())


def test_family_formulas_known_values():
    x = np.array([1.0, np.e - 1.0])
    assert np.allclose(pow3(x, 0.9, 0.4, 1.0)[0], 0.5)
    assert np.allclose(ilog2(x, 0.8, 0.3)[1], 0.5)  # ln(e) = 1
    assert np.allclose(janoschek(np.array([1e-12]), 0.9, 0.1, 1.0, 1.0), 0.1, atol=1e-9)  # starts at β
    assert np.allclose(janoschek(np.array([1e6]), 0.9, 0.1, 1.0, 1.0), 0.9)  # ends at α


def test_prior_curves_obey_the_rejection_rule():
    y, yn, sigma = sample_curves(500, np.random.default_rng(0))
    assert y.shape == yn.shape == (500, 100) and accepted(y).all()
    assert ((y >= 0) & (y <= 1)).all() and (y[:, -1] > y[:, 0]).all()
    assert np.allclose(np.log(sigma).mean(), -4.0, atol=0.15) and np.allclose(np.log(sigma).std(), 1.0, atol=0.1)
    assert not accepted(np.array([[0.5, 0.4], [0.1, 1.2], [0.1, np.nan]])).any()


@pytest.mark.skipif(
    importlib.util.find_spec("lcpfn") is None,
    reason="the lcpfn package is not installed (pip install --no-deps lcpfn to compare priors)",
)
def test_prior_matches_the_lcpfn_package_prior():
    import lcpfn

    n = 2000
    y, yn, _ = sample_curves(n, np.random.default_rng(1))
    rs = np.random.RandomState(1)
    theirs = [lcpfn.sample_from_prior(rs)() for _ in range(n)]
    ty, tyn = np.stack([c[0] for c in theirs]), np.stack([c[1] for c in theirs])
    crit = 1.95 * math.sqrt(2 / n)  # KS critical value at the 0.001 level
    for j in (0, 4, 19, 49, 99):
        assert _ks(y[:, j], ty[:, j]) < crit, j
        assert _ks(yn[:, j], tyn[:, j]) < crit, j
    assert _ks(y[:, -1] - y[:, 0], ty[:, -1] - ty[:, 0]) < crit
    assert _ks((yn - y).std(1), (tyn - ty).std(1)) < crit
    # and the test can fail: a prior with another noise level is told apart
    assert _ks((yn - y).std(1) * 1.5, (tyn - ty).std(1)) > crit


def test_bar_distribution_is_a_density_and_cdf_integrates_it():
    torch.manual_seed(0)
    dist = BarDistribution(torch.tensor([0.0, 0.1, 0.3, 0.35, 0.7, 1.0]))
    logits = torch.randn(3, 5)
    v = torch.linspace(-3.0, 4.0, 140001)
    dens = dist.log_prob(logits[:, None, :].expand(3, len(v), 5), v.expand(3, -1)).exp()
    total = torch.trapezoid(dens, v, dim=1)
    assert torch.allclose(total, torch.ones(3), atol=1e-3)
    cum = torch.cumulative_trapezoid(dens, v, dim=1)
    for x in (-0.5, 0.05, 0.32, 0.69, 1.2):
        k = int(torch.searchsorted(v, torch.tensor(x)))
        cdf = dist.cdf(logits, torch.full((3,), x))
        assert torch.allclose(cdf, cum[:, k - 1], atol=2e-3), x
    assert torch.allclose(dist.cdf(logits, torch.full((3,), -50.0)), torch.zeros(3), atol=1e-6)
    assert torch.allclose(dist.cdf(logits, torch.full((3,), 50.0)), torch.ones(3), atol=1e-6)


def test_queries_read_only_the_observed_context():
    torch.manual_seed(0)
    net = PFNTransformer(torch.linspace(0, 1, 11), d_model=16, n_layers=2, n_heads=2, d_ff=32).eval()
    t, y = torch.rand(2, 6), torch.rand(2, 6)
    mask = torch.tensor([[1, 1, 1, 0, 0, 0], [1, 1, 1, 1, 1, 0]], dtype=torch.bool)
    tq = torch.rand(2, 4)
    out = net(t, y, mask, tq)
    y2 = torch.where(mask, y, torch.rand(2, 6))  # unobserved values changed
    assert torch.allclose(out, net(t, y2, mask, tq), atol=1e-6)
    assert torch.allclose(out[:, :2], net(t, y, mask, tq[:, :2]), atol=1e-6)  # queries do not see one another
    assert not torch.allclose(out, net(t, y + 0.3 * mask, mask, tq), atol=1e-3)


def test_crossing_quantiles_hand_worked():
    p = np.array([[0.0, 0.2, 0.6, 1.0], [0.05, 0.08, 0.5, 0.4], [0.0, 0.0, 0.0, 0.05]])
    out = crossing_quantiles(p, 10.0, (0.1, 0.5, 0.9), np.array([100.0, 100.0, 35.0]))
    # row 0: 0.1 halfway from query 1 (0.0, 10 b.) to 2 (0.2, 20 b.) → 15; 0.5 at 20 + 10·0.75 → 28 (27.5 rounded up);
    # 0.9 at 30 + 10·0.75 → 38 (37.5 up). Row 1: the running max keeps 0.5 at 30 b.; 0.9 never reached → cap.
    assert out.tolist() == [[15.0, 28.0, 38.0], [ceil_ := 21.0, 30.0, 100.0], [35.0, 35.0, 35.0]]
    assert ceil_ == np.ceil(20 + 10 * (0.1 - 0.08) / 0.42)


def test_normalised_prefix_is_rising_in_unit_interval():
    S = np.array([[10, 20, 30, 40, 0.0]]) * 4
    L = np.array([[2.0, 2.2, 1.5, 1.0, 0.0]])
    t, y, valid, L_max, T = normalise_prefix(S, L, [4], [60], [4])
    assert T.tolist() == [100.0] and L_max.tolist() == [2.2]
    assert np.allclose(t[0, :4], [0.1, 0.2, 0.3, 0.4]) and valid[0].tolist() == [True] * 4 + [False]
    assert np.allclose(y[0, :4], 1 - L[0, :4] / 2.2) and y[0, 1] == 0.0 and (y[0, :4] <= 1).all()


def test_batches_and_loss(zoo_bank):
    rng = np.random.default_rng(0)
    b = prior_batch(8, rng)
    assert 60 <= b.t.shape[1] <= 72 and b.target.any() and (b.n_ctx >= 1).all()
    rows = np.flatnonzero(zoo_bank.split == "fm_train")
    bb = bank_batch(zoo_bank, rows, 8, rng)
    assert (bb.n_ctx >= 4).all() and bb.target.any()
    ctx_y = bb.y[bb.ctx]
    assert (ctx_y >= -1e-6).all() and (ctx_y <= 1).all()
    net = PFNTransformer(prior_borders(b.y, 20), d_model=16, n_layers=1, n_heads=2, d_ff=32)
    assert torch.isfinite(batch_nll(net, b, 8)) and torch.isfinite(batch_nll(net, bb))


@pytest.fixture(scope="module")
def zoo_bank():
    from mara.curves.bank import default_bank_path, load_bank

    return load_bank(default_bank_path())


@pytest.fixture(scope="module")
def tiny_ckpt(tmp_path_factory):
    from omegaconf import OmegaConf

    from mara.core.config import plain_config
    from mara.predictors.lcpfn.train import LCPFNFitSettings, train_prior

    pc = predictor_config("lcpfn")
    pc.net = OmegaConf.create({"d_model": 16, "n_layers": 1, "n_heads": 2, "d_ff": 32, "n_buckets": 20})
    pc.prior_train.steps, pc.prior_train.save_every, pc.prior_train.batch_size = 4, 2, 8
    fit = LCPFNFitSettings.from_config(plain_config(pc))
    out = tmp_path_factory.mktemp("lcpfn")
    return train_prior(fit, out, seed=0), fit, out


def test_interrupted_training_continues_identically(tiny_ckpt, tmp_path):
    import mara.predictors.lcpfn.train as tr
    from mara.predictors.lcpfn.predictor import load_lcpfn

    rec, pc, _ = tiny_ckpt

    calls = {"n": 0}
    orig = tr.batch_nll

    def stop_after_two(*a, **k):
        calls["n"] += 1
        if calls["n"] > 2:
            raise KeyboardInterrupt
        return orig(*a, **k)

    tr.batch_nll = stop_after_two
    try:
        with pytest.raises(KeyboardInterrupt):
            tr.train_prior(pc, tmp_path, seed=0)
    finally:
        tr.batch_nll = orig
    assert (tmp_path / "state.pt").exists()
    resumed = tr.train_prior(pc, tmp_path, seed=0)
    a, _ = load_lcpfn(rec["ckpt"])
    b, _ = load_lcpfn(resumed["ckpt"])
    for (k, va), vb in zip(a.state_dict().items(), b.state_dict().values()):
        assert torch.allclose(va, vb, atol=1e-6), k
    assert resumed["steps"] == 4


def test_predictor_through_the_factory(zoo_bank, tiny_ckpt):
    from omegaconf import OmegaConf

    from mara.predictors.prefix import build_queries, query_inputs

    rec, _, _ = tiny_ckpt
    cfg = OmegaConf.merge(predictor_config("lcpfn"), {"ckpt_path": rec["ckpt"], "memo_entries": 100_000})
    p = predictor_from(cfg, zoo_bank.path)
    q = build_queries(zoo_bank, ["CNN_Cifar10"], "fm_val", zoo_bank.family_params, n_ranks=2)
    args = query_inputs(zoo_bank, q)
    band = p.predict_quantiles(*args)
    assert band.shape == (len(q["rows"]), 3)
    assert (np.diff(band, axis=1) >= 0).all() and (band >= 0).all() and (band <= q["cap"][:, None]).all()
    assert np.array_equal(p.predict_remaining(*args), band[:, 1])
    # the memo of network outputs: a repeated prefix, alone or in another batch, gets the same band as when computed
    fresh = predictor_from(cfg, zoo_bank.path)
    idx = np.arange(len(q["rows"]))[::-3]
    assert np.array_equal(fresh.predict_quantiles(*(np.asarray(a)[idx] for a in args)), band[idx])
    assert np.array_equal(p.predict_quantiles(*args), band) and 0 < len(p._memo) <= len(q["rows"])
    cold = list(args)
    cold[2] = np.full(len(q["rows"]), 3)
    assert (p.predict_quantiles(*cold) == q["cap"][:, None]).all()


@pytest.mark.parametrize("name", ["lcpfn", "lcpfn_ft"])
def test_shipped_checkpoints_load(name, zoo_bank):
    p = predictor_from(name, zoo_bank.path)
    assert p.name == "lcpfn" and sum(v.numel() for v in p.net.state_dict().values()) < 500_000


def test_cli_bad_stage_is_one_line_exit_2():
    r = subprocess.run(
        [sys.executable, "-m", "mara.predictors.lcpfn_train", "stage=bogus"],
        check=False,
        capture_output=True,
        text=True,
    )
    assert r.returncode == 2 and r.stderr.strip().count("\n") == 0 and "stage must be" in r.stderr
