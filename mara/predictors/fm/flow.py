"""Conditional flow matching pieces written out (paper Eq. 7–8): CondOT path, loss, Euler sampler, Sobol noise.

Names follow the math: ``z0`` noise, ``z1`` data, ``zu`` the point on the path at flow time ``u``.
"""

from __future__ import annotations

import torch


def condot_path(z0: torch.Tensor, z1: torch.Tensor, u: torch.Tensor):
    """z_u = (1−u) z0 + u z1 and its target velocity z1 − z0 (Eq. 7); u [B] broadcast over the last dim."""
    u = u[..., None]
    return (1.0 - u) * z0 + u * z1, z1 - z0


def fm_loss(velocity, z1: torch.Tensor, ctx_term: torch.Tensor, z0: torch.Tensor, u: torch.Tensor) -> torch.Tensor:
    """Eq. 8: mean over the batch of ‖v(z_u, u, c) − (z1 − z0)‖² / K."""
    zu, target = condot_path(z0, z1, u)
    v = velocity(zu, u, ctx_term)
    return ((v - target) ** 2).mean()


@torch.no_grad()
def euler_sample(velocity, z0: torch.Tensor, ctx_term: torch.Tensor, n_steps: int) -> torch.Tensor:
    """Integrate dz/du = v(z, u, c) from u=0 to 1 with ``n_steps`` Euler steps. z0 [B, N, K], ctx_term [B, 1, D]."""
    z = z0
    dt = 1.0 / n_steps
    for k in range(n_steps):
        u = torch.full((), k * dt, dtype=z.dtype)
        z = z + dt * velocity(z, u, ctx_term)
    return z


def sobol_gaussian(n: int, dim: int, seed: int = 0, eps: float = 1e-6) -> torch.Tensor:
    """N fixed scrambled-Sobol points mapped to N(0, I) by the inverse normal CDF (clamped, so finite): [n, dim]."""
    engine = torch.quasirandom.SobolEngine(dimension=dim, scramble=True, seed=seed)
    p = engine.draw(n, dtype=torch.float64).clamp(eps, 1.0 - eps)
    return torch.special.ndtri(p).to(torch.float32)
