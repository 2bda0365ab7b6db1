"""Benchmark queries over a bank's curves: for each curve, ε and budget drawn deterministically from its family's
parameters and prefixes spread over the budget on the obs_every grid (the prediction benchmark's and the band
calibration's queries; a query counts only if the curve has not crossed ε by its prefix end)."""

from __future__ import annotations

from pathlib import Path

import numpy as np

from mara.core.config import ConfigError
from mara.curves.bank import CurveBank
from mara.predictors.data import observe, true_remaining


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
