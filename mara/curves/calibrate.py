"""Calibrate per-family targets ε so that independent feasibility (Oracle) sits at a target rate.

For each family, ε is scaled so that a task drawn as in the workload generator (a pool curve, the
family's ε jitter, a budget draw) reaches its target within its budget with probability ``target``.
Budgets are kept; only ε moves. The scaled table has the same form as ``PAPER_FAMILY_PARAMS``.
"""

from __future__ import annotations

import numpy as np

from mara.curves.bank import CurveBank
from mara.curves.families import PAPER_FAMILY_PARAMS


def _best_within_budget(bank: CurveBank, rows: np.ndarray, budget: np.ndarray) -> np.ndarray:
    """Lowest cumulative-average loss each curve reaches within its budget: min_{s <= B} L(s). [B]"""
    prefix_min = np.fmin.accumulate(np.nan_to_num(bank.L, nan=np.inf), axis=1)
    idx = np.minimum(budget, bank.lengths[rows]) - 1
    return prefix_min[rows, idx]


def sample_eps_budget(
    params: dict, rng: np.random.Generator, n: int, scale: float = 1.0
) -> tuple[np.ndarray, np.ndarray]:
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
        eps0, budget = sample_eps_budget(base_params[fam], rng, n_samples, 1.0)
        # a sample is feasible at scale c iff c * eps0 >= min_{s<=B} L(s): the target rate is a quantile
        need_scale = _best_within_budget(bank, pick, budget) / eps0
        scale = float(np.quantile(need_scale, target, method="inverted_cdf"))
        out[fam] = scale_params(base_params[fam], scale)
        out[fam]["feasible_rate"] = round(float(np.mean(need_scale <= scale)), 4)
    return out
