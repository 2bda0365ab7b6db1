"""Calibrate per-family targets ε so that independent feasibility (Oracle) sits at a target rate.

For each family, ε is scaled so that a task drawn as in the workload generator (a pool curve, the
family's ε jitter, a budget draw) reaches its target within its budget with probability ``target``.
Budgets are kept; only ε moves. The scaled table has the same form as ``PAPER_FAMILY_PARAMS``.
"""
from __future__ import annotations

import numpy as np

from mara.curves.bank import CurveBank
from mara.families import PAPER_FAMILY_PARAMS


def _feasible_rate(L: np.ndarray, eps: np.ndarray, budget: np.ndarray) -> float:
    """Fraction of samples whose curve (rows of L [B, N]) reaches eps [B] within budget [B] batches."""
    n = L.shape[1]
    upto = np.arange(1, n + 1)[None, :] <= budget[:, None]
    return float(((L <= eps[:, None]) & upto).any(axis=1).mean())


def sample_eps_budget(params: dict, rng: np.random.Generator, n: int, scale: float = 1.0) -> tuple[np.ndarray, np.ndarray]:
    """Draw n (ε, budget) pairs from a family entry exactly as the workload generator does, ε times ``scale``."""
    if "eps" in params:
        eps = params["eps"] * scale * rng.uniform(0.9, 1.1, size=n)
        lo, hi = params["budget"]
        budget = rng.integers(lo, hi + 1, size=n)
    else:
        lo, hi = params["eps_range"]
        eps = scale * np.exp(rng.uniform(np.log(lo), np.log(hi), size=n))
        budget = rng.choice(np.asarray(params["budget_set"]), size=n)
    return eps, budget


def scale_params(params: dict, scale: float) -> dict:
    """A family entry with ε (or the ε range) multiplied by ``scale``."""
    out = {k: list(v) if isinstance(v, (list, tuple)) else v for k, v in params.items()}
    if "eps" in out:
        out["eps"] = float(params["eps"] * scale)
    else:
        out["eps_range"] = [float(x * scale) for x in params["eps_range"]]
    return out


def calibrate_family_params(
    bank: CurveBank,
    base_params: dict | None = None,
    target: float = 0.70,
    split: str = "pool",
    n_samples: int = 20000,
    seed: int = 0,
    families=None,
) -> dict:
    """Return a family_params table with each family's ε scaled so its feasible rate ≈ target."""
    base_params = base_params or PAPER_FAMILY_PARAMS
    out = {}
    for fam in families or bank.families:
        if fam not in base_params:
            continue
        rows = bank.rows(fam, split)
        if len(rows) == 0:
            continue
        rng = np.random.default_rng([seed, len(out)])
        pick = rows[rng.integers(0, len(rows), size=n_samples)]
        L = np.nan_to_num(bank.L[pick], nan=np.inf)
        eps0, budget = sample_eps_budget(base_params[fam], rng, n_samples, 1.0)
        # feasibility is monotone in the scale: bisect in log space
        lo, hi = -12.0, 12.0
        for _ in range(60):
            mid = 0.5 * (lo + hi)
            if _feasible_rate(L, eps0 * np.exp(mid), budget) < target:
                lo = mid
            else:
                hi = mid
        out[fam] = scale_params(base_params[fam], float(np.exp(hi)))
        out[fam]["feasible_rate"] = round(_feasible_rate(L, eps0 * np.exp(hi), budget), 4)
    return out
