"""LC-PFN's network: a transformer over observed (t, y) points that answers queries at future t with a discretised
distribution over y (Adriaensen et al. 2023, after Müller et al.'s PFNs).

``BarDistribution``: K buckets between ``borders`` [K+1]; inside buckets the density is flat (p_k / width_k), the two
outer buckets are half-normal tails reaching to ±∞ (scale set so the tail's median lies one bucket width out) — a
distribution with full support whose log-density is the training loss (the PFN's prior-data NLL).
``PFNTransformer``: context tokens = enc(t) + enc(y), query tokens = enc(t) + a learned query vector; every token
attends to the context tokens only (queries never see one another), pre-LN blocks; the query tokens' outputs are
logits over the K buckets. Shapes: ``B`` curves, ``N`` tokens (context first, then queries), ``K`` buckets.
"""

from __future__ import annotations

import math

import torch
import torch.nn.functional as F
from torch import nn

HALF_NORMAL_MEDIAN = 0.6744897501960817  # Φ⁻¹(0.75): a half-normal's median in units of its scale


class BarDistribution(nn.Module):
    """Riemann distribution over y with half-normal tails (module docstring); ``borders`` [K+1] increasing."""

    def __init__(self, borders: torch.Tensor):
        super().__init__()
        self.register_buffer("borders", torch.as_tensor(borders, dtype=torch.float32).clone())

    @property
    def n_buckets(self) -> int:
        return self.borders.numel() - 1

    def _parts(self):
        w = self.borders[1:] - self.borders[:-1]
        return w, w[0] / HALF_NORMAL_MEDIAN, w[-1] / HALF_NORMAL_MEDIAN

    def log_prob(self, logits: torch.Tensor, y: torch.Tensor) -> torch.Tensor:
        """log p(y) [...] for logits [..., K] and y [...]."""
        w, s_lo, s_hi = self._parts()
        K = self.n_buckets
        k = torch.clamp(torch.searchsorted(self.borders[1:-1].contiguous(), y.contiguous(), right=False), 0, K - 1)
        logp = torch.log_softmax(logits, dim=-1).gather(-1, k[..., None])[..., 0]
        flat = -torch.log(w[k])
        log_hn = 0.5 * math.log(2.0 / math.pi)
        lo = log_hn - torch.log(s_lo) - 0.5 * ((self.borders[1] - y) / s_lo) ** 2
        hi = log_hn - torch.log(s_hi) - 0.5 * ((y - self.borders[-2]) / s_hi) ** 2
        dens = torch.where(k == 0, lo, torch.where(k == K - 1, hi, flat))
        return logp + dens

    def cdf(self, logits: torch.Tensor, v: torch.Tensor) -> torch.Tensor:
        """P(Y ≤ v) [...] for logits [..., K] and v [...] (broadcast)."""
        w, s_lo, s_hi = self._parts()
        p = torch.softmax(logits, dim=-1)
        b = self.borders
        inner = ((v[..., None] - b[:-1]) / w).clamp(0.0, 1.0)  # share of each flat bucket below v
        erf = lambda z: torch.erf(z / math.sqrt(2.0))
        lo_share = torch.where(v >= b[1], torch.ones_like(v), 1.0 - erf((b[1] - v).clamp(min=0.0) / s_lo))
        hi_share = torch.where(v <= b[-2], torch.zeros_like(v), erf((v - b[-2]).clamp(min=0.0) / s_hi))
        mid = (p[..., 1:-1] * inner[..., 1:-1]).sum(-1)
        return p[..., 0] * lo_share + mid + p[..., -1] * hi_share


def prior_borders(y: torch.Tensor, n_buckets: int) -> torch.Tensor:
    """[K+1] bucket borders at equal-mass quantiles of sample values ``y`` (the PFN recipe), strictly increasing."""
    b = torch.quantile(y.flatten().double(), torch.linspace(0.0, 1.0, n_buckets + 1, dtype=torch.float64))
    return (b + 1e-6 * torch.arange(n_buckets + 1, dtype=torch.float64)).float()


class _Block(nn.Module):
    def __init__(self, d: int, heads: int, d_ff: int, dropout: float = 0.0):
        super().__init__()
        self.heads = heads
        self.n1, self.n2 = nn.LayerNorm(d), nn.LayerNorm(d)
        self.qkv, self.out = nn.Linear(d, 3 * d), nn.Linear(d, d)
        self.ff = nn.Sequential(nn.Linear(d, d_ff), nn.GELU(), nn.Linear(d_ff, d))
        self.dropout = dropout

    def forward(self, h: torch.Tensor, allow: torch.Tensor) -> torch.Tensor:
        """h [B, N, d]; allow [B, 1, N, N] bool (query i may read key j)."""
        B, N, d = h.shape
        q, k, v = self.qkv(self.n1(h)).view(B, N, 3, self.heads, d // self.heads).permute(2, 0, 3, 1, 4)
        a = F.scaled_dot_product_attention(q, k, v, attn_mask=allow, dropout_p=self.dropout if self.training else 0.0)
        h = h + self.out(a.transpose(1, 2).reshape(B, N, d))
        return h + self.ff(self.n2(h))


class PFNTransformer(nn.Module):
    """(context t, y, mask; query t) → bucket logits at each query (module docstring)."""

    def __init__(self, borders, d_model: int = 64, n_layers: int = 4, n_heads: int = 4, d_ff: int = 128):
        super().__init__()
        self.dist = BarDistribution(torch.as_tensor(borders))
        self.t_enc = nn.Sequential(nn.Linear(1, d_model), nn.GELU(), nn.Linear(d_model, d_model))
        self.y_enc = nn.Linear(1, d_model)
        self.query = nn.Parameter(torch.zeros(d_model))
        self.blocks = nn.ModuleList([_Block(d_model, n_heads, d_ff) for _ in range(n_layers)])
        self.norm = nn.LayerNorm(d_model)
        self.decoder = nn.Sequential(nn.Linear(d_model, d_ff), nn.GELU(), nn.Linear(d_ff, self.dist.n_buckets))

    def forward(self, t_ctx, y_ctx, ctx_mask, t_qry) -> torch.Tensor:
        """t_ctx, y_ctx [B, C], ctx_mask [B, C] bool (observed), t_qry [B, Q] → logits [B, Q, K]."""
        C = t_ctx.shape[1]
        ctx = self.t_enc(t_ctx[..., None]) + self.y_enc(y_ctx[..., None])
        qry = self.t_enc(t_qry[..., None]) + self.query
        h = torch.cat([ctx, qry], dim=1)
        keys = torch.cat([ctx_mask, torch.zeros_like(t_qry, dtype=torch.bool)], dim=1)  # only context is read
        allow = keys[:, None, None, :].expand(-1, 1, h.shape[1], -1)
        for blk in self.blocks:
            h = blk(h, allow)
        return self.decoder(self.norm(h[:, C:]))
