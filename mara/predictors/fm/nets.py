"""Flow-predictor networks (plain nn.Modules, no Lightning).

Shapes: ``B`` tasks, ``H`` history length, ``N`` flow samples, ``K`` target bins (32),
``x [B, H, 4]`` history features, ``static [B, 4]``, ``z [B, N, K]`` or ``[B, K]``, ``u`` scalar or ``[B]``.
"""

from __future__ import annotations

import math

import torch
from torch import nn
from torch.nn.utils.rnn import pack_padded_sequence

from mara.predictors.prefix import FEATURE_SETS, N_STATIC_BY_SET


class Standardizer(nn.Module):
    """Fixed affine standardisation (mean/std over the training set), stored with the weights."""

    def __init__(self, dim: int):
        super().__init__()
        self.register_buffer("mean", torch.zeros(dim))
        self.register_buffer("std", torch.ones(dim))

    def set(self, mean, std) -> None:
        self.mean.copy_(torch.as_tensor(mean, dtype=self.mean.dtype))
        self.std.copy_(torch.as_tensor(std, dtype=self.std.dtype).clamp_min(1e-6))

    def forward(self, x):
        return (x - self.mean) / self.std

    def inverse(self, z):
        return z * self.std + self.mean


def sinusoidal_embedding(u: torch.Tensor, dim: int, max_period: float = 1000.0) -> torch.Tensor:
    """Sinusoidal embedding of flow time u ∈ [0, 1]: [...] -> [..., dim]."""
    half = dim // 2
    freqs = torch.exp(torch.linspace(0.0, math.log(max_period), half, device=u.device, dtype=u.dtype))
    ang = u[..., None] * freqs
    return torch.cat([torch.sin(ang), torch.cos(ang)], dim=-1)


class HistoryEncoder(nn.Module):
    """GRU over the (standardised) history features, packed by length: the final state of each task's own
    sequence, and work proportional to the real (not padded) lengths."""

    def __init__(self, n_features: int = 4, hidden: int = 64):
        super().__init__()
        self.gru = nn.GRU(n_features, hidden, batch_first=True)

    def forward(self, x: torch.Tensor, lengths: torch.Tensor) -> torch.Tensor:
        packed = pack_padded_sequence(x, lengths.long().cpu(), batch_first=True, enforce_sorted=False)
        _, h = self.gru(packed)  # h [1, B, hidden], already in the input order
        return h[0]


class VelocityMLP(nn.Module):
    """v_θ(z_u, u, c): two hidden layers; the first layer is split so the context term is computed once per task."""

    def __init__(self, dim: int = 32, ctx_dim: int = 64, hidden: int = 128, time_dim: int = 32):
        super().__init__()
        self.time_dim = time_dim
        self.in_z = nn.Linear(dim, hidden)
        self.in_t = nn.Linear(time_dim, hidden, bias=False)
        self.in_c = nn.Linear(ctx_dim, hidden, bias=False)
        self.hidden = nn.Sequential(nn.SiLU(), nn.Linear(hidden, hidden), nn.SiLU(), nn.Linear(hidden, dim))

    def context_term(self, ctx: torch.Tensor) -> torch.Tensor:
        return self.in_c(ctx)

    def forward(self, z: torch.Tensor, u: torch.Tensor, ctx_term: torch.Tensor) -> torch.Tensor:
        """z [..., K], u broadcastable to z's leading dims, ctx_term [..., hidden] (from ``context_term``)."""
        u = torch.as_tensor(u, dtype=z.dtype, device=z.device)
        t = self.in_t(sinusoidal_embedding(u, self.time_dim))
        return self.hidden(self.in_z(z) + t + ctx_term)


class FlowNet(nn.Module):
    """History encoder + static context → context vector; velocity field over standardised targets.
    ``feature_set`` (features.py) names the inputs the net was trained on; it fixes ``n_static``."""

    def __init__(
        self,
        n_bins: int = 32,
        gru_hidden: int = 64,
        ctx_dim: int = 64,
        mlp_hidden: int = 128,
        time_dim: int = 32,
        n_hist_features: int = 4,
        n_static: int | None = None,
        feature_set: str = "v1",
    ):
        super().__init__()

        if feature_set not in FEATURE_SETS:
            raise ValueError(f"feature_set must be one of {FEATURE_SETS}, got {feature_set!r}")
        self.n_bins, self.feature_set = n_bins, feature_set  # checkpoints without feature_set are v1
        n_static = N_STATIC_BY_SET[feature_set] if n_static is None else n_static
        self.hist_norm = Standardizer(n_hist_features)
        self.static_norm = Standardizer(n_static)
        self.target_norm = Standardizer(n_bins)
        self.encoder = HistoryEncoder(n_hist_features, gru_hidden)
        self.context = nn.Sequential(nn.Linear(gru_hidden + n_static, ctx_dim), nn.SiLU(), nn.Linear(ctx_dim, ctx_dim))
        self.velocity = VelocityMLP(n_bins, ctx_dim, mlp_hidden, time_dim)

    def context_vector(self, x: torch.Tensor, lengths: torch.Tensor, static: torch.Tensor) -> torch.Tensor:
        """Raw features -> the prefix's context vector c [B, ctx_dim] (what the novelty score measures)."""
        h = self.encoder(self.hist_norm(x), lengths)
        return self.context(torch.cat([h, self.static_norm(static)], dim=-1))

    def encode(self, x: torch.Tensor, lengths: torch.Tensor, static: torch.Tensor) -> torch.Tensor:
        """Raw features -> context term for the velocity net [B, mlp_hidden]."""
        return self.velocity.context_term(self.context_vector(x, lengths, static))
