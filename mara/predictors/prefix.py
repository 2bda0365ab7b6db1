"""A job's loss prefix, shared by every predictor: the observed history, its features, its true remaining batches
and the benchmark's queries over a bank.

Shapes: ``B`` tasks, ``H`` padded history length, features ``[B, H, 4]``, static ``[B, n_static]``; ``E`` queries.

**Observed histories** (``observe``): S, L as the simulator emits them, one observation every ``obs_every``
batches; ``true_remaining``: the capped true remaining batches from a prefix end.

**Features** (the flow predictor's inputs, paper §4.1; the decision heads build on them). Two feature sets (a
checkpoint records which one it was trained with; old checkpoints are ``v1``):

- ``v1`` (the paper's): history ``[log S, log(L/L_now), Δlog S, Δlog(L/L_now)]`` with S in samples, static
  ``[log bs, log lr, log L_now, log horizon_samples]``. Batch size and the absolute loss level identify the
  family (audio bs ∈ {1,2,4}, text {4,8}; L_now ≈ ln 10 for CIFAR, ≈ ln 2 for binary tasks), so the net can
  learn per-family answers that do not transfer.
- ``v2`` (scale-free): time in optimiser steps (batches) and the loss only relative to ``L_now``: history
  ``[log n, log(L/L_now), Δlog n, Δlog(L/L_now)]`` with n = S/bs, static ``[log lr, log horizon_batches]``.
  The targets (Eq. 5) are already relative to L(S0), so a v2 prediction is invariant to rescaling the loss
  and to the batch size at fixed step count.
- ``v3``: v2 plus the power-law fit that WLS extrapolates (γ-weighted, LARA.md) as static inputs
  ``[θ₁, ln L̂(S_now) − ln L_now, weighted residual std]``: the net starts from the baseline's extrapolation and
  learns the deviation from it; all three are invariant to loss and sample rescaling.

**Queries** (``build_queries``): for each curve, ε and budget drawn deterministically from its family's parameters
and prefixes spread over the budget on the obs_every grid (the prediction benchmark's and the band calibration's
queries; a query counts only if the curve has not crossed ε by its prefix end).
"""

from __future__ import annotations

from pathlib import Path

import numpy as np

from mara.core.config import ConfigError
from mara.curves.bank import CurveBank, load_bank
from mara.predictors.baselines.wls import wls_fit

N_HIST_FEATURES = 4
N_STATIC = 4
FEATURE_SETS = ("v1", "v2", "v3")
N_STATIC_BY_SET = {"v1": 4, "v2": 2, "v3": 5}


def history_features(
    S: np.ndarray, L: np.ndarray, lengths: np.ndarray, batch_size=None, feature_set: str = "v1"
) -> np.ndarray:
    """[log t, log(L/L_now), Δlog t, Δlog(L/L_now)] per observation (t = S for v1, S/bs for v2), zero past each
    length: [B, H] -> [B, H, 4]."""
    S = np.asarray(S, np.float64)
    L = np.asarray(L, np.float64)
    lengths = np.asarray(lengths, np.int64)
    B, H = S.shape
    valid = np.arange(H)[None, :] < lengths[:, None]
    last = np.clip(lengths - 1, 0, H - 1)
    L_now = L[np.arange(B), last]
    if feature_set in ("v2", "v3"):
        S = S / np.asarray(batch_size, np.float64)[:, None]
    elif feature_set != "v1":
        raise ValueError(f"feature_set must be one of {FEATURE_SETS}, got {feature_set!r}")
    logS = np.log(np.where(valid, S, 1.0))
    logL = np.log(np.where(valid, L, 1.0) / np.where(valid, L_now[:, None], 1.0))
    d_logS = np.diff(logS, axis=1, prepend=logS[:, :1])
    d_logL = np.diff(logL, axis=1, prepend=logL[:, :1])
    x = np.stack([logS, logL, d_logS, d_logL], axis=-1)
    return np.where(valid[..., None], x, 0.0)


def static_context(
    batch_size, lr, L_now, horizon_samples, feature_set: str = "v1", S=None, L=None, lengths=None
) -> np.ndarray:
    """v1: [log bs, log lr, log L_now, log horizon] (ε deliberately excluded); v2: [log lr, log horizon/bs];
    v3: v2 + [θ₁, ln L̂(S_now) − ln L_now, residual std] of the WLS power-law fit of the prefix (needs S, L, lengths).
    [B] arrays -> [B, n_static]."""
    if feature_set == "v1":
        cols = [batch_size, lr, L_now, horizon_samples]
    elif feature_set in ("v2", "v3"):
        cols = [lr, np.asarray(horizon_samples, np.float64) / np.asarray(batch_size, np.float64)]
    else:
        raise ValueError(f"feature_set must be one of {FEATURE_SETS}, got {feature_set!r}")
    out = np.stack([np.log(np.maximum(np.asarray(c, np.float64), 1e-12)) for c in cols], axis=-1)
    if feature_set == "v3":
        out = np.concatenate([out, power_law_features(S, L, lengths)], axis=-1)
    return out


def power_law_features(S, L, lengths, gamma: float = 0.9) -> np.ndarray:
    """[θ₁, ln L̂(S_now) − ln L_now, weighted residual std] of the WLS fit ln L = θ₀ + θ₁ ln S: [B, 3]."""

    S = np.asarray(S, np.float64)
    L = np.asarray(L, np.float64)
    lengths = np.asarray(lengths, np.int64)
    B, H = S.shape
    t0, t1 = wls_fit(S, L, lengths, gamma)
    last = np.clip(lengths - 1, 0, H - 1)
    S_now, L_now = S[np.arange(B), last], L[np.arange(B), last]
    gap = t0 + t1 * np.log(S_now) - np.log(L_now)
    idx = np.arange(H)[None, :]
    valid = idx < lengths[:, None]
    w = np.where(valid, gamma ** np.clip(lengths[:, None] - 1 - idx, 0, None), 0.0)
    r = np.where(
        valid, np.log(np.where(valid, L, 1.0)) - t0[:, None] - t1[:, None] * np.log(np.where(valid, S, 1.0)), 0.0
    )
    sd = np.sqrt((w * r * r).sum(1) / np.maximum(w.sum(1), 1e-12))
    return np.nan_to_num(np.stack([t1, gap, sd], axis=-1))


# ------------------------------------------------------------------------------------------ observed histories
def observe(bank: CurveBank, rows: np.ndarray, n_obs: np.ndarray, obs_every: int = 10):
    """Histories as the simulator emits them: S, L [E, max n_obs] (zero-padded) at s = obs_every·(1..n)."""
    rows, n_obs = np.asarray(rows), np.asarray(n_obs, np.int64)
    H = int(n_obs.max())
    s = obs_every * np.arange(1, H + 1)[None, :].repeat(len(rows), 0)  # batches
    valid = np.arange(H)[None, :] < n_obs[:, None]
    s_idx = np.where(valid, s - 1, 0)
    S = np.where(valid, s * bank.batch_size[rows][:, None].astype(np.float64), 0.0)
    L = np.where(valid, bank.L[rows[:, None], s_idx], 0.0)
    return S, L


def true_remaining(bank: CurveBank, rows, n_obs, eps, obs_every: int = 10):
    """Capped true remaining batches from the prefix end and the remaining cap: ([E], [E])."""
    s0 = np.asarray(n_obs) * obs_every
    cap = bank.lengths[rows] - s0
    first = bank.first_crossing(rows, eps)
    rem = np.where(first > s0, first - s0, 0)
    return np.minimum(rem, cap).astype(np.float64), cap


# ---------------------------------------------------------------------------------------------------- queries
def draw_eps_budget(params: dict, rng: np.random.Generator) -> tuple[float, int]:
    """One (ε, budget) from a family entry: ID ε·U[0.9,1.1], integer budget; OOD log-uniform ε, budget from the set."""
    if "eps" in params:
        return float(params["eps"] * rng.uniform(0.9, 1.1)), int(
            rng.integers(params["budget"][0], params["budget"][1] + 1)
        )
    lo, hi = params["eps_range"]
    return float(np.exp(rng.uniform(np.log(lo), np.log(hi)))), int(rng.choice(params["budget_set"]))


def build_queries(
    bank: CurveBank, families, split: str, family_params: dict, n_ranks: int = 8, obs_every: int = 10, seed: int = 0
) -> dict:
    """Deterministic queries [Q]: rows, rank, n_obs, eps, budget, truth (capped), cap (remaining); ``n_ranks``
    observation counts spread from 4 (a warm estimate) to the budget's or curve's end."""

    def counts(r, budget):
        n_max = max(4, min(budget, bank.lengths[r] - 1) // obs_every - 1)
        return np.round(np.linspace(4, n_max, n_ranks)).astype(int)

    return _queries(bank, families, split, family_params, counts, obs_every, seed)


def build_cold_queries(
    bank: CurveBank, families, split: str, family_params: dict, obs=(1, 2, 3), obs_every: int = 10, seed: int = 0
) -> dict:
    """Queries [Q] of cold tasks (``obs`` observations, fewer than a warm estimate needs), keyed as ``build_queries``'s,
    with the same (ε, budget) draw per curve; ``rank`` is the observation count's index in ``obs``."""
    return _queries(bank, families, split, family_params, lambda r, budget: obs, obs_every, seed)


def _queries(bank: CurveBank, families, split: str, family_params: dict, counts, obs_every: int, seed: int) -> dict:
    """One query per curve of ``families``' ``split`` and observation count ``counts(row, budget)``; ε and budget drawn
    per curve from (seed, row); queries whose curve crossed ε by their prefix end are dropped (the task would be
    done)."""
    rows = np.concatenate([bank.rows(f, split) for f in families])
    out = {k: [] for k in ("rows", "rank", "n_obs", "eps", "budget")}
    for r in rows:
        eps, budget = draw_eps_budget(family_params[bank.family[r]], np.random.default_rng([seed, int(r)]))
        for k, n in enumerate(counts(r, budget)):
            for key, v in zip(out, (r, k, n, eps, budget)):
                out[key].append(v)
    q = {k: np.asarray(v) for k, v in out.items()}
    first = bank.first_crossing(q["rows"], q["eps"])
    keep = first > q["n_obs"] * obs_every
    q = {k: v[keep] for k, v in q.items()}
    q["first"] = first[keep]
    q["truth"], q["cap"] = true_remaining(bank, q["rows"], q["n_obs"], q["eps"], obs_every)
    return q


def query_inputs(bank: CurveBank, q: dict, obs_every: int = 10) -> tuple:
    """A predictor call's positional inputs for the queries ``q`` on ``bank``: (S, L, n_obs, eps, cap, batch_size,
    lr), the observed prefixes built here."""
    rows = q["rows"]
    S, L = observe(bank, rows, q["n_obs"], obs_every)
    return S, L, q["n_obs"], q["eps"], q["cap"], bank.batch_size[rows], bank.lr[rows]


def cal_bank_path(bank_path, setting, where: str = "cal_bank") -> Path | None:
    """The calibration bank a ``cal_bank`` setting names: ``beside`` → ``<bank stem>_cal.parquet`` next to the bank
    at ``bank_path`` (None when there is none), a path (must exist: else a ConfigError naming ``where``), or null →
    None."""
    if setting in (None, "", "none"):
        return None
    bank_path = Path(bank_path)
    if str(setting) == "beside":
        p = bank_path.with_name(f"{bank_path.stem}_cal{bank_path.suffix}")
        return p if p.is_file() else None
    p = Path(str(setting))
    if not p.is_file():
        raise ConfigError(f"{where}={setting}: no such file (a bank of cal curves, 'beside' or null)")
    return p


def untrained_cal_queries(bank: CurveBank, cal_bank: CurveBank, obs_every: int = 10, seed: int = 0) -> dict | None:
    """Queries on the ``cal`` curves of ``cal_bank``'s families that ``bank`` has no training curves of (ε / budget
    drawn from ``bank``'s table, as the simulator draws them), or None when there are none."""
    params = bank.family_params or {}
    fams = [
        str(f)
        for f in np.unique(cal_bank.family)
        if not len(bank.rows(f, "fm_train")) and str(f) in params and len(cal_bank.rows(f, "cal"))
    ]
    return build_queries(cal_bank, fams, "cal", params, obs_every=obs_every, seed=seed) if fams else None


def untrained_cal(bank_path, cal_bank, obs_every: int = 10, seed: int = 0, where: str = "cal_bank"):
    """(the calibration bank ``cal_bank`` names beside the bank at ``bank_path``, ``untrained_cal_queries`` on it), or
    None when there is no such bank or it has no curves of families the bank does not train on."""
    extra = cal_bank_path(bank_path, cal_bank, where)
    if extra is None:
        return None
    cal = load_bank(extra)
    q = untrained_cal_queries(load_bank(bank_path), cal, obs_every, seed)
    return None if q is None else (cal, q)
