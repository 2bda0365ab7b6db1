"""Target-loss trace jobs: the user states a target loss, not an iteration count (docs/traces-target-loss.md).

Every trace job keeps its arrival, GPUs, model, batch size, deadline and true work (the trace's ``num_iteration``
N). It gets a real loss curve of the curve bank: the family its model maps to (``MODEL_FAMILY``), a ``pool`` curve
and a target ε drawn per job; the curve's cumulative-average loss L, linearly interpolated between batches, first
reaches ε at a fractional batch position x*, and the curve is stretched in iterations by s = N / x*, so that the
job's loss at iteration k is L(x* · k / N) and first reaches its target at k = N exactly. Its **declared count** is
what a careful user of that model declares: s × (the count, in batches, by which 90 % of the family's ``fm_train``
runs reach the same target), rounded up. It reads only the job's scale s and its target, never its own curve; so two
jobs alike in every observable can need different true counts (tests/test_traces_target_loss.py).

Arrays are ``[J]`` over a trace's jobs; bank curves ``[R, N]`` as in mara/curves/bank.py.
"""

from __future__ import annotations

import math
import zlib
from dataclasses import dataclass

import numpy as np

from mara.curves.bank import CurveBank

#: trace model -> bank family of the same domain and kind of network (docs/traces-target-loss.md says why)
MODEL_FAMILY = {
    "resnet50": "ResNet34_Cifar10",
    "inception3": "ResNet18_Cifar10",
    "vgg16": "CNN_Cifar10",
    "bert": "ALSTM_Text_1",
    "gpt2": "ALSTM_Text_2",
    "deepspeech2": "TSFM_Audio_1",
}
DECLARE_QUANTILE = 0.9  # share of the family's past runs that reach the target within the declared count
EPS_SPREAD = (0.9, 1.1)  # a job's target: the family's ε times U[0.9, 1.1], as the paper's tasks draw it
PAST_SPLIT, JOB_SPLIT = "fm_train", "pool"  # past runs and jobs' own curves never share a curve


def crossing_positions(L: np.ndarray, eps) -> np.ndarray:
    """Fractional 1-based batch position where each row of ``L [R, N]`` first reaches ``eps`` (scalar or [R]), by
    linear interpolation between batches; 1.0 if the first batch is already there; inf if it never is. -> [R]"""
    L = np.atleast_2d(np.asarray(L, dtype=np.float64))
    eps = np.broadcast_to(np.asarray(eps, dtype=np.float64), (L.shape[0],))
    hit = L <= eps[:, None]  # NaN padding never hits
    i = hit.argmax(axis=1)
    rows = np.arange(L.shape[0])
    prev = L[rows, np.maximum(i - 1, 0)]
    cur = L[rows, i]
    with np.errstate(divide="ignore", invalid="ignore"):
        x = np.where(i == 0, 1.0, i + (prev - eps) / (prev - cur))
    return np.where(hit.any(axis=1), x, np.inf)


def quantile_count(x: np.ndarray, q: float = DECLARE_QUANTILE) -> float:
    """The smallest value by which a share ``q`` of ``x [R]`` has arrived: its ceil(q R)-th smallest (inf stays)."""
    x = np.sort(np.asarray(x, dtype=np.float64))
    return float(x[max(math.ceil(q * len(x) - 1e-9), 1) - 1])


def stretched_loss(L_row: np.ndarray, x_star: float, n_true: float, k) -> np.ndarray:
    """Loss at iterations ``k`` of a curve ``L_row [N]`` stretched so that position x_star falls on iteration n_true."""
    L_row = np.asarray(L_row, dtype=np.float64)
    L_row = L_row[~np.isnan(L_row)]
    pos = x_star * (np.asarray(k, dtype=np.float64) / float(n_true))
    return np.interp(pos, np.arange(1, len(L_row) + 1, dtype=np.float64), L_row)


def target_floor(bank: CurveBank, family: str, q: float = DECLARE_QUANTILE) -> float:
    """The lowest target a share ``q`` of the family's past runs ever reach (below it, no q-count exists)."""
    best = np.nanmin(bank.L[bank.rows(family, PAST_SPLIT)], axis=1)
    return quantile_count(best, q)


def declared_batches(bank: CurveBank, family: str, eps: float, q: float = DECLARE_QUANTILE) -> float:
    """Batches by which a share ``q`` of the family's past runs reach ``eps``."""
    return quantile_count(crossing_positions(bank.L[bank.rows(family, PAST_SPLIT)], eps), q)


@dataclass(frozen=True)
class TargetLossJobs:
    """Each job's curve, target, stretch and counts, ``[J]``."""

    family: np.ndarray  # str
    row: np.ndarray  # int: bank row of the job's own curve
    target: np.ndarray  # float: target loss (cumulative average), reached first at iteration ``true``
    x_star: np.ndarray  # float: fractional batch of the bank curve where it reaches the target
    scale: np.ndarray  # float: iterations per bank batch, s = true / x_star
    true: np.ndarray  # float: true iterations to the target (the trace's num_iteration)
    declared: np.ndarray  # float: the user's declared count
    past_batches: np.ndarray  # float: batches by which the declared share of past runs reach the target

    @property
    def seen_scale(self) -> np.ndarray:
        """Iterations per bank batch as a scheduler can read it: declared count / past runs' count (s up to the
        declared count's rounding)."""
        return self.declared / self.past_batches

    def loss(self, bank: CurveBank, j: int, k) -> np.ndarray:
        """Observed loss of job j after ``k`` iterations."""
        return stretched_loss(bank.L[self.row[j]], self.x_star[j], self.true[j], k)


def job_rng(seed: int, job_id: str) -> np.random.Generator:
    """One stream per (seed, job id): a job draws the same curve in every window and for every method."""
    return np.random.default_rng([int(seed), zlib.crc32(str(job_id).encode())])


def draw_job(bank: CurveBank, family: str, rng: np.random.Generator) -> tuple[int, float, float]:
    """(bank row, target, x_star) of one job: a target in the family's range, a pool curve that reaches it after its
    first batch (drawn among those that do)."""
    base = float((bank.family_params or {})[family]["eps"])
    lo, hi = base * EPS_SPREAD[0], base * EPS_SPREAD[1]
    lo = max(lo, target_floor(bank, family))
    hi = max(hi, lo)
    pool = bank.rows(family, JOB_SPLIT)
    for _ in range(100):
        eps = float(rng.uniform(lo, hi))
        x = crossing_positions(bank.L[pool], eps)
        ok = np.flatnonzero(np.isfinite(x) & (x > 1.0))
        if ok.size:
            pick = int(rng.choice(ok))
            return int(pool[pick]), eps, float(x[pick])
    raise ValueError(f"curve bank {bank.path}: no {JOB_SPLIT} curve of {family} reaches its targets")


def target_loss_jobs(
    job_id, model, n_true, bank: CurveBank, seed: int = 0, q: float = DECLARE_QUANTILE
) -> TargetLossJobs:
    """Curves, targets and declared counts of jobs ``[J]`` (ids, trace model names, true iteration counts); ``q``:
    the share of past runs a declared count covers."""
    J = len(job_id)
    fam = np.array([MODEL_FAMILY[str(m)] for m in model], dtype=object)
    row, target, x_star, declared = np.zeros(J, dtype=np.int64), np.zeros(J), np.zeros(J), np.zeros(J)
    past = np.zeros(J)
    n_true = np.asarray(n_true, dtype=np.float64)
    for j in range(J):
        r, _, x = draw_job(bank, fam[j], job_rng(seed, job_id[j]))
        row[j], x_star[j] = r, x
        # the target is the stretched curve's own value at N, so the crossing lands on iteration N to the last bit
        target[j] = float(stretched_loss(bank.L[r], x, n_true[j], n_true[j]))
        past[j] = declared_batches(bank, fam[j], target[j], q)
        declared[j] = math.ceil(n_true[j] / x * past[j])
    return TargetLossJobs(
        family=fam.astype(str),
        row=row,
        target=target,
        x_star=x_star,
        scale=n_true / x_star,
        true=n_true.copy(),
        declared=declared,
        past_batches=past,
    )
