"""LC-PFN as a remaining-batches predictor: the crossing of ε read off the network's marginal distributions.

The observed prefix is normalised as LC-PFN reads curves (``lcpfn.data.normalise_prefix``: t = s / T, y = 1 − L /
L_max); the network gives, at query times every ``query_every`` batches up to the task's cap, a distribution over y.
For a curve that rises (the loss falls), "crossed ε by batch s" is "y(s) ≥ y_ε", so P(crossed by s) is read as
1 − CDF_s(y_ε), made non-decreasing in s (running maximum; 0 at the prefix end, where y < y_ε). The remaining batches
at level τ are the first s where that probability reaches τ (linear between query times, rounded up), or the cap when
it does not within the cap. ``predict_quantiles`` gives the ``band`` levels (lo, 0.5, hi); the median is
``predict_remaining``. Fewer than ``min_obs`` observations → the cap, as for FM and WLS. The network's outputs for an
observed prefix do not depend on ε, and the simulator asks about the same bank prefix in many episodes: they are kept
(float16, whether just computed or found) in a bounded map per predictor, so a repeated prefix costs only the read-out.

Shapes: ``B`` tasks, ``H`` padded history, ``Q`` query times, ``K`` buckets.
"""

from __future__ import annotations

from collections import OrderedDict
from collections.abc import Mapping
from pathlib import Path

import numpy as np
import torch

from mara.core.config import SHIPPED_CKPT_DIR, plain_config
from mara.core.safe_load import check_kind, load_checkpoint, net_from
from mara.predictors.factory import shipped_checkpoint
from mara.predictors.lcpfn.data import normalise_prefix
from mara.predictors.lcpfn.net import PFNTransformer
from mara.predictors.qr.levels import check_levels

PRIOR_CKPT = SHIPPED_CKPT_DIR / "lcpfn_prior.ckpt"


class _Net(PFNTransformer):
    """PFNTransformer built from its saved hyper-parameters (the borders come with the weights)."""

    def __init__(self, n_buckets: int, d_model: int = 64, n_layers: int = 4, n_heads: int = 4, d_ff: int = 128):
        super().__init__(torch.linspace(0.0, 1.0, int(n_buckets) + 1), d_model, n_layers, n_heads, d_ff)


def save_lcpfn(net: PFNTransformer, hparams: Mapping, path, extra: Mapping | None = None, recipe: str | None = None):
    """Weights, hyper-parameters and the command that trained them (tensors and plain values only) of an LC-PFN."""
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    torch.save(
        {
            "kind": "lcpfn",
            "state_dict": {k: v.detach().clone() for k, v in net.state_dict().items()},
            "hparams": plain_config(dict(hparams)),
            "extra": plain_config(dict(extra or {})),
            "recipe": recipe,
        },
        path,
    )
    return path


def load_lcpfn(path) -> tuple[PFNTransformer, dict]:
    """(net in eval mode, the checkpoint's {hparams, extra}) of a ``save_lcpfn`` file."""
    path = Path(path)
    blob = check_kind(load_checkpoint(path, "LC-PFN checkpoint"), path, "lcpfn", ("state_dict", "hparams"))
    return net_from(_Net, blob, path, "an LC-PFN checkpoint"), {
        "hparams": blob["hparams"],
        "extra": blob.get("extra", {}),
    }


def finetuned_ckpt_path(bank_path=None) -> Path:
    """``lcpfn_<bank>.ckpt``: the LC-PFN fine-tuned on a shipped bank's fm_train curves (else the default bank's)."""
    return shipped_checkpoint("lcpfn", bank_path)


def crossing_quantiles(p_cross: np.ndarray, step: float, levels, cap: np.ndarray) -> np.ndarray:
    """[B, L] remaining batches at ``levels`` from P(crossed by the k-th query) ``p_cross`` [B, Q] (queries every
    ``step`` batches after the prefix end; made non-decreasing here, 0 at the prefix end); the cap where not reached."""
    p = np.maximum.accumulate(np.concatenate([np.zeros((len(p_cross), 1)), p_cross], axis=1), axis=1)
    out = np.empty((len(p), len(levels)))
    rows = np.arange(len(p))
    for j, tau in enumerate(levels):
        k = np.argmax(p >= tau, axis=1)  # first query at or above τ (0 when none: handled below)
        hit = p[rows, k] >= tau
        k = np.maximum(k, 1)
        lo, hi = p[rows, k - 1], p[rows, k]
        frac = np.where(hi > lo, (tau - lo) / np.where(hi > lo, hi - lo, 1.0), 1.0)
        out[:, j] = np.where(hit, np.ceil(step * (k - 1 + frac) - 1e-9), np.inf)
    return np.minimum(out, np.asarray(cap, np.float64)[:, None])


class LCPFNPredictor:
    """RemainingPredictor from an LC-PFN's marginal distributions (module docstring)."""

    name = "lcpfn"

    def __init__(
        self,
        net: PFNTransformer,
        band=(0.1, 0.5, 0.9),
        min_obs: int = 4,
        query_every: int = 10,
        chunk: int = 256,
        memo_entries: int = 20_000,
    ):
        band = check_levels(band)
        if len(band) != 3 or abs(band[1] - 0.5) > 1e-9:
            raise ValueError(f"lcpfn band must be three levels (lo, 0.5, hi), got {list(band)}")
        self.net, self.quantiles = net.eval(), band
        self.min_obs, self.query_every, self.chunk = int(min_obs), int(query_every), int(chunk)
        self.memo_entries, self._memo = int(memo_entries), OrderedDict()

    @classmethod
    def from_config(cls, cfg, bank_path=None) -> LCPFNPredictor:
        path = cfg.get("ckpt_path")
        if path in (None, "prior"):
            path = PRIOR_CKPT
        elif path == "finetuned":
            path = finetuned_ckpt_path(bank_path)
        net, _ = load_lcpfn(path)
        return cls(
            net,
            band=tuple(cfg.get("band", (0.1, 0.5, 0.9))),
            min_obs=int(cfg.get("min_obs", 4)),
            query_every=int(cfg.get("query_every", 10)),
            memo_entries=int(cfg.get("memo_entries", 20_000)),
        )

    def crossing_probability(self, S, L, lengths, eps, cap_remaining, batch_size) -> np.ndarray:
        """[B, Q] P(crossed ε by the k-th query time, k = 1..Q, every ``query_every`` batches) for warm prefixes."""
        t, y, valid, L_max, T = normalise_prefix(S, L, lengths, cap_remaining, batch_size)
        y_eps = 1.0 - np.asarray(eps, np.float64) / L_max
        s_now = T - np.asarray(cap_remaining, np.float64)
        n_q = np.maximum(1, np.ceil(np.asarray(cap_remaining, np.float64) / self.query_every)).astype(np.int64)
        logits = self._query_logits(t, y, valid, s_now, T, n_q)  # [B, Q, K]
        Q = logits.shape[1]
        with torch.inference_mode():
            cdf = self.net.dist.cdf(logits, torch.from_numpy(np.repeat(y_eps[:, None], Q, axis=1)).float())
        return 1.0 - cdf.double().numpy()

    def _query_logits(self, t, y, valid, s_now, T, n_q) -> torch.Tensor:
        """[B, Q = max n_q, K] bucket logits at the query times (past a row's own n_q: its last query, the cap),
        stored as float16 per observed prefix (the memo: a prefix's logits do not depend on ε; a bounded LRU map)."""
        lengths = valid.sum(axis=1)
        keys = [hash((t[i, : lengths[i]].tobytes(), y[i, : lengths[i]].tobytes(), int(n_q[i]))) for i in range(len(t))]
        got = {k: self._memo[k] for k in keys if k in self._memo}
        miss = [i for i, k in enumerate(keys) if k not in got]
        f = lambda a: torch.from_numpy(np.ascontiguousarray(a)).float()
        for c in range(0, len(miss), self.chunk):
            idx = np.asarray(miss[c : c + self.chunk])
            Q = int(n_q[idx].max())
            s_q = s_now[idx, None] + self.query_every * np.arange(1, Q + 1)[None, :]
            t_q = np.minimum(s_q, T[idx, None]) / T[idx, None]
            H = int(lengths[idx].max())
            with torch.inference_mode():
                out = self.net(f(t[idx, :H]), f(y[idx, :H]), torch.from_numpy(valid[idx, :H]), f(t_q)).half()
            for j, i in enumerate(idx):
                got[keys[i]] = out[j, : n_q[i]].clone()
        for k in keys:  # most recently used last; the oldest leave past memo_entries (0: no memo)
            self._memo[k] = got[k]
            self._memo.move_to_end(k)
        while len(self._memo) > self.memo_entries:
            self._memo.popitem(last=False)
        Q = int(n_q.max())
        rows = []
        for k in keys:
            lg = got[k]
            rows.append(torch.cat([lg, lg[-1:].expand(Q - len(lg), -1)]) if len(lg) < Q else lg)
        return torch.stack(rows).float()

    def predict_quantiles(self, S, L, lengths, eps, cap_remaining, batch_size, lr, family=None) -> np.ndarray:
        """[B, 3] remaining batches at the band levels (lo, 0.5, hi); ordered, within [0, cap]; cold tasks: the cap."""
        lengths = np.asarray(lengths, np.int64)
        cap = np.asarray(cap_remaining, np.float64)
        out = np.repeat(cap[:, None], 3, axis=1)
        warm = np.flatnonzero(lengths >= self.min_obs)
        if len(warm):
            sub = lambda a: np.asarray(a)[warm]
            H = int(lengths[warm].max())
            p = self.crossing_probability(
                sub(S)[:, :H], sub(L)[:, :H], lengths[warm], sub(eps), cap[warm], sub(batch_size)
            )
            out[warm] = crossing_quantiles(p, self.query_every, self.quantiles, cap[warm])
        return out

    def predict_remaining(self, S, L, lengths, eps, cap_remaining, batch_size, lr, family=None) -> np.ndarray:
        """The median [B]."""
        return self.predict_quantiles(S, L, lengths, eps, cap_remaining, batch_size, lr, family=family)[:, 1]
