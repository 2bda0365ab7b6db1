"""The in-context decision head: the decision head's quantiles, conditioned on the task's family's already-seen curves.

Same network as the decision head (``QuantileNet``: GRU over the history features + a static vector → non-crossing
quantiles of log(1 + remaining batches)), its static vector extended by the family-context features
(mara/predictors/qr_ctx/family.py: the nearest reference curves' remaining batches to ε, absolute and relative, and
how near they are). Reference curves: the bank's fm_train curves of the task's family, else (a family the head never
trained on) the ``cal`` curves beside the bank (``context.cal_bank``); a family with neither gets no context (the
head is trained with context dropped for a share of its examples, so it answers without). An ensemble (several
seeds, one file) averages the members' quantiles of log(1 + batches) level by level. With ``blend.weight`` w > 0, for
a family with training curves the result is (1 − w) × that average + w × the plain decision head's (``blend.ckpt``:
qr's checkpoint by default; its own members averaged): two heads that read the task differently, averaged; a family
the heads never trained on gets the in-context head alone (the plain head never saw it; docs/predictors-sharper.md).
``ContextHeadPredictor`` has the decision head's interface: ``predict_remaining`` (0.5 level), ``predict_quantiles``
→ [B, 3] at ``band`` (lo, 0.5, hi), each a trained level. Fewer than ``min_obs`` observations → the cap (cold).
With ``recalibrate``, the band of a family the head never trained on is shifted level by level (as qr_cal's,
bands/level_shift.py) on its cal curves, cross-fitted: each half of them is queried with the other half as
its reference curves, so no query reads its own curve.

Shapes: ``B`` tasks, ``H`` history, ``Q`` trained levels.
"""

from __future__ import annotations

from pathlib import Path
from typing import Mapping

import numpy as np
import torch

from mara.core.config import ConfigError, plain_config
from mara.core.safe_load import CheckpointError, check_kind, load_checkpoint, net_from
from mara.curves.bank import default_bank_path, load_bank
from mara.predictors.bands.level_shift import apply_level_shifts, level_shifts
from mara.predictors.factory import shipped_checkpoint
from mara.predictors.prefix import cal_bank_path, query_inputs, untrained_cal
from mara.predictors.qr.data import MIN_OBS, N_STATIC, decision_inputs
from mara.predictors.qr.head import QuantileNet, ensemble_log1p, load_heads, warm_quantiles
from mara.predictors.qr.head import default_ckpt_path as plain_ckpt_path
from mara.predictors.qr.levels import check_levels, level_index
from mara.predictors.qr_ctx.family import N_CONTEXT, FamilyContext

KIND = "qr_ctx"
RECIPE = "python -m mara.predictors.context_train"  # what a checkpoint of this kind was trained by
N_STATIC_CTX = N_STATIC + N_CONTEXT


def context_inputs(
    ctx: FamilyContext | None, S, L, lengths, eps, cap_remaining, batch_size, lr, family, exclude_rows=None
):
    """(history features [B, H, 4], static [B, N_STATIC + N_CONTEXT]): the decision head's inputs and the family
    context's features (zeros, "no context", without a ``ctx`` or a family)."""
    x, st = decision_inputs(S, L, lengths, eps, cap_remaining, batch_size, lr)
    if ctx is None:
        c = np.zeros((len(st), N_CONTEXT))
    else:
        c = ctx.features(S, L, lengths, eps, cap_remaining, batch_size, family, exclude_rows)
    return x, np.concatenate([st, c], axis=1)


def reference_context(bank_path, cal_bank="beside", k: int = 8) -> FamilyContext:
    """The bank's fm_train curves per family, then the ``cal`` curves (``cal_bank``: ``beside`` / a path / null) of
    the families without training curves."""
    bank = load_bank(bank_path)
    pairs = [(bank, "fm_train")]
    extra = cal_bank_path(bank_path, cal_bank, "predictor.context.cal_bank")
    if extra is not None:
        pairs.append((load_bank(extra), "cal"))
    return FamilyContext.from_banks(pairs, k=k)


def default_ckpt_path(bank_path=None) -> Path:
    """``mara/data/checkpoints/qr_ctx_<bank>.ckpt`` for a shipped bank that has one, else the default bank's."""
    return shipped_checkpoint(KIND, bank_path)


def save_context_head(nets, hparams: Mapping, path, extra: Mapping | None = None) -> Path:
    """One file holding every member net (same hyper-parameters), kind ``qr_ctx``."""
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    members = [{"state_dict": n.state_dict(), "hparams": plain_config(dict(hparams))} for n in nets]
    torch.save({"kind": KIND, "recipe": RECIPE, "members": members, "extra": plain_config(dict(extra or {}))}, path)
    return path


def merge_checkpoints(paths, out) -> Path:
    """One in-context head file holding every member of the checkpoints ``paths`` (e.g. two trainings' seeds)."""
    members, extra = [], []
    for p in paths:
        blob = check_kind(load_checkpoint(p, "in-context head checkpoint"), p, KIND, ("members",))
        members += list(blob["members"])
        extra.append(blob.get("extra", {}))
    out = Path(out)
    out.parent.mkdir(parents=True, exist_ok=True)
    torch.save(
        {
            "kind": KIND,
            "recipe": RECIPE,
            "members": members,
            "extra": {"merged": [Path(p).name for p in paths], "parts": extra},
        },
        out,
    )
    load_context_heads(out)  # every member the same network and levels
    return out


def load_context_heads(path) -> list[QuantileNet]:
    """The member nets of an in-context head checkpoint (loaded as data)."""
    path = Path(path)
    if not path.exists():
        raise FileNotFoundError(
            f"no in-context head checkpoint {path} (train one: python -m mara.predictors.context_train)"
        )
    blob = check_kind(load_checkpoint(path, "in-context head checkpoint"), path, KIND, ("members",))
    members = blob["members"]
    if not isinstance(members, list) or not members:
        raise CheckpointError(f"{path} is not an in-context decision-head (qr_ctx) checkpoint (no members)")
    nets = [net_from(QuantileNet, m, path, "an in-context decision-head (qr_ctx) checkpoint") for m in members]
    if any(n.levels != nets[0].levels for n in nets):
        raise CheckpointError(f"{path}: every member must be trained at the same levels")
    return nets


class ContextHeadPredictor:
    """RemainingPredictor: the decision head with the family context (module docstring)."""

    name = KIND

    def __init__(
        self,
        nets,
        context: FamilyContext | None,
        band=(0.1, 0.5, 0.9),
        min_obs: int = MIN_OBS,
        plain=(),
        blend: float = 0.0,
        trained_families=(),
    ):
        band = check_levels(band)
        if len(band) != 3 or abs(band[1] - 0.5) > 1e-9:
            raise ValueError(f"qr_ctx band must be three levels (lo, 0.5, hi), got {list(band)}")
        self.nets = [n.eval() for n in (nets if isinstance(nets, (list, tuple)) else [nets])]
        self.levels = self.nets[0].levels
        self.quantiles, self.band_idx = band, level_index(self.levels, band)
        self.context, self.min_obs = context, int(min_obs)
        self.plain, self.blend = list(plain), float(blend)  # the plain decision head's members and their weight
        self.trained = set(str(f) for f in trained_families)
        self.shifts, self.shift_bins = {}, (10, 20)  # {family: [n_bins, 3]} band shifts (fit_shifts)
        if self.plain and any(n.levels != self.levels for n in self.plain):
            raise ValueError("qr_ctx blend: the plain head must be trained at the in-context head's levels")

    @classmethod
    def from_config(cls, cfg, bank_path=None) -> "ContextHeadPredictor":
        bank_path = Path(bank_path or default_bank_path())
        cc = cfg.get("context") or {}
        k = cc.get("k", 8)
        if isinstance(k, bool) or not isinstance(k, int) or k < 1:
            raise ConfigError(f"predictor.context.k must be an integer >= 1 (nearest reference curves), got {k!r}")
        ctx = reference_context(bank_path, cc.get("cal_bank", "beside"), k) if cc.get("enabled", True) else None
        path = cfg.get("ckpt_path") or default_ckpt_path(bank_path)
        bc = cfg.get("blend") or {}
        w = bc.get("weight", 0.0)
        if isinstance(w, bool) or not isinstance(w, (int, float)) or not 0 <= w < 1:
            raise ConfigError(f"predictor.blend.weight must be in [0, 1) (the plain head's share), got {w!r}")
        plain, trained = (), ()
        if w > 0:
            plain = load_heads(bc.get("ckpt") or plain_ckpt_path(bank_path))
            bank = load_bank(bank_path)
            trained = np.unique(bank.family[bank.split == "fm_train"])
        head = cls(
            load_context_heads(path),
            ctx,
            band=tuple(cfg.get("band", (0.1, 0.5, 0.9))),
            min_obs=int(cfg.get("min_obs", MIN_OBS)),
            plain=plain,
            blend=float(w),
            trained_families=trained,
        )
        rc = cfg.get("recalibrate")
        if rc:
            head.fit_shifts(
                bank_path,
                rc.get("cal_bank", "beside"),
                tuple(rc.get("obs_bins", (10, 20))),
                int(rc.get("obs_every", 10)),
                int(rc.get("seed", 0)),
            )
        return head

    def fit_shifts(self, bank_path, cal_bank="beside", obs_bins=(10, 20), obs_every: int = 10, seed: int = 0):
        """Level shifts of the band for the families the head never trained on, on their cal curves cross-fitted in
        two halves (module docstring); none without cal curves."""
        self.shifts, self.shift_bins = {}, tuple(int(b) for b in obs_bins)
        found = untrained_cal(bank_path, cal_bank, obs_every, seed, "predictor.recalibrate.cal_bank")
        if found is None:
            return
        cal, q = found
        half = np.random.default_rng([seed, 7]).random(len(cal)) < 0.5
        band = np.empty((len(q["rows"]), 3))
        for h in (True, False):
            m = half[q["rows"]] == h
            ref = np.flatnonzero(half != h)
            ctx = FamilyContext.from_banks([(_RowsOf(cal, ref), "cal")], k=self.context.k if self.context else 8)
            sub = {k: v[m] for k, v in q.items()}
            head = ContextHeadPredictor(self.nets, ctx, self.quantiles, self.min_obs)
            band[m] = head.predict_quantiles(*query_inputs(cal, sub, obs_every), family=cal.family[sub["rows"]])
        self.shifts = level_shifts(band, q["truth"], self.quantiles, cal.family[q["rows"]], q["n_obs"], self.shift_bins)

    def all_quantiles(self, S, L, lengths, eps, cap_remaining, batch_size, lr, family=None) -> np.ndarray:
        """Remaining batches at every trained level [B, Q], within [0, cap]; cold tasks (< min_obs) get the cap."""

        lengths, cap = np.asarray(lengths, np.int64), np.asarray(cap_remaining, np.float64)

        def warm_log1p(warm, sub):
            fam = None if family is None else sub(family)
            n = sub(lengths)
            x, st = context_inputs(self.context, sub(S), sub(L), n, sub(eps), sub(cap), sub(batch_size), sub(lr), fam)
            q = ensemble_log1p(self.nets, x, n, st)
            if self.plain and family is not None:
                mix = np.isin(np.asarray(fam).astype(str), list(self.trained))
                if mix.any():  # the plain head reads the static inputs without the family context
                    qp = ensemble_log1p(self.plain, x[mix], n[mix], st[mix, : st.shape[1] - N_CONTEXT])
                    q[mix] = (1 - self.blend) * q[mix] + self.blend * qp
            return q

        return warm_quantiles(lengths, cap_remaining, self.min_obs, len(self.levels), warm_log1p)

    def predict_quantiles(self, S, L, lengths, eps, cap_remaining, batch_size, lr, family=None) -> np.ndarray:
        """[B, 3] remaining batches at the band levels (lo, 0.5, hi); ordered, within [0, cap]."""
        q = self.all_quantiles(S, L, lengths, eps, cap_remaining, batch_size, lr, family)[:, self.band_idx]
        if self.shifts and family is not None:
            warm = np.flatnonzero(np.asarray(lengths) >= self.min_obs)
            sub = lambda a: np.asarray(a)[warm]  # noqa: E731
            q[warm] = apply_level_shifts(
                q[warm], sub(family), sub(lengths), self.shifts, self.shift_bins, sub(cap_remaining)
            )
        return q

    def predict_remaining(self, S, L, lengths, eps, cap_remaining, batch_size, lr, family=None) -> np.ndarray:
        """The learned median [B]."""
        return self.predict_quantiles(S, L, lengths, eps, cap_remaining, batch_size, lr, family)[:, 1]


class _RowsOf:
    """Some of a bank's curves, as ``FamilyContext.from_banks`` reads a bank (family, L, lengths, rows())."""

    def __init__(self, bank, rows):
        self.family, self.L, self.lengths = bank.family[rows], bank.L[rows], bank.lengths[rows]
        self.split = bank.split[rows]

    def rows(self, family, split):
        return np.flatnonzero((self.family == family) & (self.split == split))
