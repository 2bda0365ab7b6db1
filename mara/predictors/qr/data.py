"""Inputs and training examples of the decision head: "how many batches until ε" as quantiles.

The flow predictor learns the future curve and reads the crossing of ε off sampled futures; the decision head is
trained on the crossing itself. An example is what the simulator asks at a refresh: a task's observed prefix
(n ≥ 4 observations, every ``obs_every`` batches), its target ε and the batches left to its generation cap →
the true remaining batches ``min(need − s0, cap_left + 1)`` (``cap_left + 1``: ε not reached within the cap, as
in ``predictor: truth``), in log(1 + batches).

Inputs (``decision_inputs``, from the observed prefix, ε, cap, batch size and lr only): the FM's v1 history
features [B, H, 4] and a static vector [B, 9]: the v1 static context (log bs, log lr, log L_now, log horizon in
samples), the prefix's power-law fit (θ₁, fit gap, residual std; features.power_law_features), log(L_now / ε) and
log(1 + WLS remaining estimate) — the baseline's extrapolation to ε, which the net corrects.

Examples (``decision_examples``) follow the workload: ε and budget drawn from the bank's family table exactly as
the workload generator draws them (``sample_eps_budget``), the prefix end s0 = n·obs_every uniform over the
refreshes a task can get before it finishes or its budget ends (s0 < need, s0 < budget, s0 < cap). Only the
bank's ``fm_train`` curves train the head and its ``fm_val`` curves validate it (the FM's split; the workload's
``pool`` curves are never read).
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from mara.curves.bank import CurveBank
from mara.curves.calibrate import sample_eps_budget
from mara.predictors.baselines.wls import WLSPredictor
from mara.predictors.prefix import (
    history_features,
    observe,
    power_law_features,
    static_context,
)

N_STATIC = 9
MIN_OBS = 4


def decision_inputs(S, L, lengths, eps, cap_remaining, batch_size, lr):
    """(history features [B, H, 4], static [B, 9]) float64 from the observed prefix, ε and the cap (module
    docstring)."""
    S, L = np.asarray(S, np.float64), np.asarray(L, np.float64)
    lengths = np.asarray(lengths, np.int64)
    H = int(lengths.max())
    S, L = S[:, :H], L[:, :H]
    bs = np.asarray(batch_size, np.float64)
    cap = np.maximum(np.asarray(cap_remaining, np.float64), 1.0)
    rows = np.arange(S.shape[0])
    L_now = L[rows, lengths - 1]
    x = history_features(S, L, lengths, bs, "v1")
    st = static_context(bs, lr, L_now, cap * bs, "v1")
    pl = power_law_features(S, L, lengths)
    ratio = np.log(np.maximum(L_now, 1e-12) / np.maximum(np.asarray(eps, np.float64), 1e-12))
    wls = WLSPredictor(min_obs=1).predict_remaining(S, L, lengths, eps, cap, bs, lr)
    static = np.concatenate([st, pl, ratio[:, None], np.log1p(np.maximum(wls, 0.0))[:, None]], axis=1)
    return x, np.nan_to_num(static, posinf=0.0, neginf=0.0)


def remaining_target(need, s0, cap_left) -> np.ndarray:
    """log(1 + min(need − s0, cap_left + 1)) [B]: the true remaining batches, "cap + 1" when ε is not reached."""
    need = np.asarray(need, np.int64)
    s0 = np.asarray(s0, np.int64)
    cap_left = np.asarray(cap_left, np.int64)
    rem = np.minimum(np.maximum(need - s0, 0), cap_left + 1)
    return np.log1p(rem.astype(np.float64))


@dataclass
class DecisionExamples:
    rows: np.ndarray  # [E] bank rows
    n_obs: np.ndarray  # [E]
    eps: np.ndarray  # [E]
    cap_left: np.ndarray  # [E] batches left to the cap at the prefix end
    x: np.ndarray  # [E, H, 4]
    static: np.ndarray  # [E, 9]
    y: np.ndarray  # [E] log1p true remaining batches


def decision_examples(
    bank: CurveBank, rows, n: int, rng: np.random.Generator, family_params: dict, obs_every: int = 10
) -> DecisionExamples:
    """n examples from the curves ``rows`` (module docstring); curves whose family has no ε table are skipped."""
    rows = np.asarray([r for r in rows if bank.family[r] in family_params])
    if len(rows) == 0:
        raise ValueError("decision head: no training curve has an ε/budget entry in the bank's family table")
    out_r, out_n, out_e = [], [], []
    got = 0
    while got < n:
        m = 2 * (n - got) + 16
        r = rows[rng.integers(len(rows), size=m)]
        eps, budget = np.empty(m), np.empty(m, np.int64)
        for fam in np.unique(bank.family[r]):
            idx = np.flatnonzero(bank.family[r] == fam)
            e, b = sample_eps_budget(family_params[str(fam)], rng, len(idx))
            eps[idx], budget[idx] = e, b
        need = bank.first_crossing(r, eps)
        last = np.minimum(np.minimum(need, budget), bank.lengths[r]) - 1  # s0 must stay below each
        n_max = last // obs_every
        ok = n_max >= MIN_OBS
        r, eps, n_max = r[ok], eps[ok], n_max[ok]
        n_obs = rng.integers(MIN_OBS, n_max + 1)
        take = min(len(r), n - got)
        out_r.append(r[:take]), out_n.append(n_obs[:take]), out_e.append(eps[:take])
        got += take
    r, n_obs, eps = np.concatenate(out_r), np.concatenate(out_n), np.concatenate(out_e)
    s0 = n_obs * obs_every
    cap_left = bank.lengths[r] - s0
    S, L = observe(bank, r, n_obs, obs_every)
    x, static = decision_inputs(S, L, n_obs, eps, cap_left, bank.batch_size[r], bank.lr[r])
    y = remaining_target(bank.first_crossing(r, eps), s0, cap_left)
    return DecisionExamples(r, n_obs, eps, cap_left, x, static, y)
