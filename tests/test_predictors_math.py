"""Known answers for the predictor math: Eq. 5→6 round trip, WLS on a power law, crossing decoder, Sobol noise."""

import numpy as np
import torch

from mara.predictors.baselines.wls import (
    WLSPredictor,
    wls_fit,
    wls_init,
    wls_remaining,
    wls_solve,
    wls_update,
)
from mara.predictors.fm.crossing import decode_crossing
from mara.predictors.fm.flow import condot_path, sobol_gaussian
from mara.predictors.fm.targets import bin_edges, interp_C, interval_targets, reconstruct_L

torch.set_num_threads(1)


def test_interval_targets_round_trip_exact_at_every_edge():
    rng = np.random.default_rng(0)
    B, N = 16, 300
    bs = rng.choice([1, 4, 16, 64], size=B).astype(np.float64)
    ell = rng.uniform(0.01, 3.0, size=(B, N))
    C_batches = np.cumsum(ell, axis=1) * bs[:, None]  # sample units
    s0_b = rng.integers(40, 150, size=B)
    h_b = rng.integers(10, N - s0_b + 1) + rng.uniform(0, 0.9, size=B)  # non-integer horizons too
    h_b = np.minimum(h_b, N - s0_b)
    S0 = s0_b * bs
    L0 = C_batches[np.arange(B), s0_b - 1] / S0
    edges = bin_edges(S0, h_b * bs, 32)
    C_edges = interp_C(C_batches, bs, edges)
    y = interval_targets(C_edges, edges, L0)
    C_hat, L_hat = reconstruct_L(y, edges, L0)
    np.testing.assert_allclose(C_hat, C_edges, rtol=1e-12, atol=1e-9)
    np.testing.assert_allclose(L_hat, C_edges / edges, rtol=1e-12)
    np.testing.assert_allclose(C_hat[:, 0], S0 * L0, rtol=0, atol=1e-9)


def test_interp_C_is_exact_piecewise_linear():
    C_batches = np.array([[2.0, 3.0, 7.0]])  # bs = 2: per-sample losses 1, 0.5, 2
    s = np.array([[0.0, 1.0, 2.0, 3.0, 5.0, 6.0]])
    np.testing.assert_allclose(interp_C(C_batches, np.array([2.0]), s), [[0.0, 1.0, 2.0, 2.5, 5.0, 7.0]])


def test_wls_recovers_noiseless_power_law_and_exact_crossing():
    a, b, bs = 3.0, 0.4, 16.0
    n = np.arange(1, 13)
    S = (10 * n * bs)[None, :]
    L = a * S ** (-b)
    t0, t1 = wls_fit(S, L, np.array([12]))
    np.testing.assert_allclose([np.exp(t0[0]), -t1[0]], [a, b], rtol=1e-6)
    eps = 0.1  # L_now ≈ 0.146
    S_star = (a / eps) ** (1 / b)
    cap = 10**9
    rem = wls_remaining(t0, t1, S[:, -1], np.array([eps]), np.array([bs]), np.array([cap]))
    assert rem[0] == np.ceil((S_star - S[0, -1]) / bs)
    # capped, and non-decreasing fit -> cap
    assert wls_remaining(t0, t1, S[:, -1], np.array([eps]), np.array([bs]), np.array([5]))[0] == 5
    assert wls_remaining(t0, np.array([0.1]), S[:, -1], np.array([eps]), np.array([bs]), np.array([77]))[0] == 77


def test_wls_batch_fit_equals_running_statistics():
    rng = np.random.default_rng(1)
    B, H = 5, 20
    lengths = rng.integers(4, H + 1, size=B)
    S = np.cumsum(rng.uniform(10, 100, size=(B, H)), axis=1)
    L = np.exp(-0.3 * np.log(S) + rng.normal(0, 0.05, size=(B, H)))
    t0, t1 = wls_fit(S, L, lengths)
    centre = np.log(S[np.arange(B), lengths - 1])
    st = wls_init(centre)
    for i in range(H):
        st = wls_update(st, S[:, i], L[:, i], active=i < lengths)
    r0, r1 = wls_solve(st)
    np.testing.assert_allclose(t0, r0, rtol=1e-10)
    np.testing.assert_allclose(t1, r1, rtol=1e-10)


def test_wls_predictor_warmup_and_bounds():
    p = WLSPredictor()
    S = np.tile(np.arange(1, 9) * 160.0, (3, 1))
    L = 2.0 * S**-0.3
    out = p.predict_remaining(
        S,
        L,
        np.array([3, 8, 8]),
        np.array([0.1, 0.1, 10.0]),
        np.array([100, 50, 40]),
        np.array([16, 16, 16]),
        np.array([1e-3] * 3),
    )
    assert out[0] == 100 and out[1] == 50 and out[2] == 0


def test_decode_crossing_known_answers():
    s = np.array([100.0, 200.0, 300.0, 400.0])
    L = np.array(
        [
            [2.0, 1.5, 1.0, 0.5],  # ε=1.25 crosses halfway between 200 and 300 -> s*=250 -> 150 samples
            [2.0, 1.9, 1.8, 1.7],  # never -> cap
            [1.0, 0.9, 0.8, 0.7],
        ]
    )  # already at/below ε at s0 -> 0
    eps = np.array([1.25, 1.0, 1.0])
    out = decode_crossing(s[None, :], L, eps, np.array([10.0, 10.0, 10.0]), np.array([1000, 33, 50]))
    np.testing.assert_array_equal(out, [15, 33, 0])
    # ceil to whole batches, and capped
    out = decode_crossing(s, L[0], 1.25, 40.0, 1000)
    assert out == np.ceil(150 / 40)
    assert decode_crossing(s, L[0], 1.25, 1.0, 20) == 20


def test_sobol_noise_finite_and_fixed():
    z = sobol_gaussian(8, 32, seed=0)
    assert z.shape == (8, 32) and torch.isfinite(z).all()
    assert torch.equal(z, sobol_gaussian(8, 32, seed=0))
    big = sobol_gaussian(1024, 32, seed=0)
    assert torch.isfinite(big).all() and abs(float(big.mean())) < 0.05


def test_condot_path_endpoints():
    z0, z1 = torch.randn(4, 32), torch.randn(4, 32)
    zu, v = condot_path(z0, z1, torch.zeros(4))
    assert torch.allclose(zu, z0) and torch.allclose(v, z1 - z0)
    zu, _ = condot_path(z0, z1, torch.ones(4))
    assert torch.allclose(zu, z1)
