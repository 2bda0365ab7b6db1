"""LC-PFN's learning-curve prior (Adriaensen et al., NeurIPS 2023, §3 and appendix; families from Domhan et al. 2015).

A prior curve is a weighted sum of three parametric families evaluated at epochs x ≥ 1 (the paper's m = 100 epochs),
each weight ~ U(0, 1) and each family's parameters from the paper's "peaked" prior; the curve is kept only if it is
increasing overall (y(m) > y(1)) and inside [0, 1] at every epoch (rejection), and observed with Gaussian noise of
standard deviation σ = exp(N(−4, 1)):

- pow3(x) = c − a·x^(−α),                 c ~ U(0, 1.25), a ~ U(−0.6, 0.6), α ~ LogNormal(0, 2)
- ilog2(x) = c − a / ln(x + 1),           c ~ U(0, 1),    a ~ U(−0.5, 0.5)
- janoschek(x) = α − (α − β)·exp(−κ·x^δ), α ~ U(0, 1), β ~ U(0, 2), κ ~ LogNormal(−2, 1), δ ~ LogNormal(0, 0.5)

(The parameter ranges are the paper's numbers.) Sampling is vectorised: draw a block of candidate curves, keep the
accepted ones, repeat. Shapes: ``N`` curves, ``G`` epochs of the grid ``x`` [G].
"""

from __future__ import annotations

import numpy as np

FAMILIES = ("pow3", "ilog2", "janoschek")
NOISE_LOG_MEAN, NOISE_LOG_STD = -4.0, 1.0  # ln σ of the observation noise


def pow3(x, c, a, alpha):
    """c − a·x^(−α); x [G], parameters [N, 1] → [N, G]."""
    return c - a * np.power(x, -alpha)


def ilog2(x, c, a):
    """c − a / ln(x + 1); x [G], parameters [N, 1] → [N, G]."""
    return c - a / np.log(x + 1.0)


def janoschek(x, alpha, beta, kappa, delta):
    """α − (α − β)·exp(−κ·x^δ); x [G], parameters [N, 1] → [N, G]."""
    return alpha - (alpha - beta) * np.exp(-kappa * np.power(x, delta))


def _family_curves(x: np.ndarray, n: int, rng: np.random.Generator) -> np.ndarray:
    """[3, n, G]: one draw of each family's parameters per curve, evaluated on ``x``."""
    col = lambda v: v[:, None]
    u, ln = rng.uniform, rng.lognormal
    with np.errstate(over="ignore", invalid="ignore", under="ignore"):
        return np.stack(
            [
                pow3(x, col(u(0.0, 1.25, n)), col(u(-0.6, 0.6, n)), col(ln(0.0, 2.0, n))),
                ilog2(x, col(u(0.0, 1.0, n)), col(u(-0.5, 0.5, n))),
                janoschek(x, col(u(0.0, 1.0, n)), col(u(0.0, 2.0, n)), col(ln(-2.0, 1.0, n)), col(ln(0.0, 0.5, n))),
            ]
        )


def accepted(y: np.ndarray) -> np.ndarray:
    """[N] bool: the prior's rejection rule — finite, inside [0, 1] everywhere, and ending above where it starts."""
    finite = np.isfinite(y).all(axis=1)
    yz = np.where(np.isfinite(y), y, -1.0)
    return finite & (yz >= 0.0).all(axis=1) & (yz <= 1.0).all(axis=1) & (yz[:, -1] > yz[:, 0])


def sample_curves(n: int, rng: np.random.Generator, x=None) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """``n`` prior curves on epochs ``x`` [G] (default 1..100): (noise-free y [n, G], noisy y [n, G], σ [n])."""
    x = np.arange(1, 101, dtype=np.float64) if x is None else np.asarray(x, np.float64)
    kept, got = [], 0
    while got < n:
        m = 2 * (n - got) + 64  # about a third of the candidates are accepted
        w = rng.uniform(0.0, 1.0, size=(len(FAMILIES), m, 1))
        y = (w * _family_curves(x, m, rng)).sum(axis=0)
        y = y[accepted(y)][: n - got]
        kept.append(y)
        got += len(y)
    y = np.concatenate(kept)
    sigma = np.exp(rng.normal(NOISE_LOG_MEAN, NOISE_LOG_STD, size=n))
    return y, y + sigma[:, None] * rng.standard_normal(y.shape), sigma
