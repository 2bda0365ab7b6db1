"""Live episodes: the simulator's workload generator, scaled to short real training runs, and the curves they fill.

Scaling (``time_scale`` c, e.g. 0.25): every family's budget range is multiplied by c (rounded), the
generation cap stays twice the largest budget (paper A.2), and ε is re-calibrated on the bank's pool
curves (``calibrate_family_params``) so that independent feasibility is again ``target`` (70 %) under the
shorter budgets: a scaled task is as hard, relative to its budget, as a full-size one. Arrivals come
from the same generator (``generate_episodes``: task set, load p, root → arrival, family, curve row, ε,
budget); a task's curve row gives its training recipe (seed, batch size, lr), which the live job then
trains for real instead of replaying the row.
"""

from __future__ import annotations

import numpy as np

from mara.curves.bank import NEVER, CurveBank
from mara.curves.calibrate import calibrate_family_params
from mara.curves.families import generation_cap
from mara.live.job import JobSpec
from mara.sim.workload import (
    EpisodeBatch,
    TaskSet,
    episodes_from_tasks,
    generate_episodes,
)


def scaled_family_params(
    bank: CurveBank, families, time_scale: float, target: float = 0.70, base: dict | None = None
) -> dict:
    """Budgets × ``time_scale`` and ε re-calibrated to independent feasibility ``target`` (see module docstring)."""
    if not 0.0 < time_scale <= 1.0:
        raise ValueError(f"live.time_scale must lie in (0, 1], got {time_scale}")
    base = base or bank.family_params
    if base is None:
        raise ValueError(f"curve bank {bank.path} carries no calibrated family_params to scale")
    scaled = {}
    for fam in families:
        if fam not in base:
            raise ValueError(f"family_params: no ε/budget entry for family {fam!r}")
        p = {k: (list(v) if isinstance(v, (list, tuple)) else v) for k, v in base[fam].items() if k != "feasible_rate"}
        if "budget" in p:
            p["budget"] = [max(1, round(time_scale * b)) for b in p["budget"]]
        else:
            p["budget_set"] = sorted({max(1, round(time_scale * b)) for b in p["budget_set"]})
        scaled[fam] = p
    return calibrate_family_params(bank, scaled, target, families=list(families))


def live_tasks(
    bank: CurveBank,
    table: dict,
    families,
    load: float,
    root: int,
    n_steps: int,
    n_episodes: int = 1,
    source: str = "real",
    data_root: str = "data_cache",
    cache_dir: str = "data_cache",
) -> list[tuple[list[dict], list[JobSpec]]]:
    """Per episode: the task dicts (arrival, budget, eps, family, cap, batch_size, lr, curve_row = job id,
    recipe_row) and job specs."""
    ts = TaskSet("live", families=tuple(families))
    ep = generate_episodes(bank, table, ts, load, root, n_episodes, n_steps)
    out = []
    for e in range(ep.E):
        tasks, specs = [], []
        for j in range(int(ep.n_tasks[e])):
            row, fam = int(ep.curve_row[e, j]), str(ep.family[e, j])
            tasks.append(
                {
                    "arrival": int(ep.arrival[e, j]),
                    "budget": int(ep.budget[e, j]),
                    "eps": float(ep.eps[e, j]),
                    "family": fam,
                    "curve_row": j,
                    "cap": generation_cap(fam, table),
                    "batch_size": int(bank.batch_size[row]),
                    "lr": float(bank.lr[row]),
                    "recipe_row": str(bank.curve_id[row]),
                }
            )
            specs.append(
                JobSpec(
                    job_id=j,
                    family=fam,
                    seed=int(bank.seed[row]),
                    batch_size=int(bank.batch_size[row]),
                    lr=float(bank.lr[row]),
                    source=source,
                    data_root=str(data_root),
                    cache_dir=str(cache_dir),
                )
            )
        out.append((tasks, specs))
    return out


class LiveCurves:
    """The curve store a live (or replayed) episode reads: ``ell/C/L [J, N]`` for its J jobs, NaN until a batch ran.

    It offers what ``episodes_from_tasks`` and ``BatchedEnv`` read of a ``CurveBank`` (``L``, ``lengths``,
    ``batch_size``, ``lr``, ``first_crossing``) with the same arithmetic (C = running sum, L = C / s).
    """

    def __init__(self, caps, batch_size, lr, ell: np.ndarray | None = None):
        self.lengths = np.asarray(caps, dtype=np.int64)
        self.batch_size = np.asarray(batch_size, dtype=np.int64)
        self.lr = np.asarray(lr, dtype=np.float64)
        J, N = len(self.lengths), int(max(self.lengths.max(initial=1), 1))
        self.ell = np.full((J, N), np.nan)
        self.C = np.full((J, N), np.nan)
        self.L = np.full((J, N), np.nan)
        self.count = np.zeros(J, dtype=np.int64)  # batches recorded per job
        if ell is not None:  # recorded curves: derive C and L exactly as CurveBank does
            n = min(N, ell.shape[1])
            self.ell[:, :n] = ell[:, :n]
            steps = np.arange(1, N + 1, dtype=np.float64)
            self.C = np.cumsum(np.nan_to_num(self.ell, nan=0.0), axis=1)
            self.L = self.C / steps
            self.L[np.isnan(self.ell)] = np.nan
            self.count = np.isfinite(self.ell).sum(axis=1)

    def record(self, row: int, s: int, loss: float) -> float:
        """Store batch ``s`` (1-based) of job ``row``; returns its cumulative-average loss L(s)."""
        self.ell[row, s - 1] = loss
        self.C[row, s - 1] = (self.C[row, s - 2] if s > 1 else 0.0) + loss
        self.L[row, s - 1] = self.C[row, s - 1] / np.float64(s)
        self.count[row] = s
        return float(self.L[row, s - 1])

    def recorded(self, row: int) -> int:
        """Batches recorded so far for job ``row``."""
        return int(self.count[row])

    def first_crossing(self, rows, eps) -> np.ndarray:
        hit = self.L[np.asarray(rows)] <= np.asarray(eps, dtype=np.float64)[:, None]
        return np.where(hit.any(axis=1), hit.argmax(axis=1) + 1, NEVER).astype(np.int64)


def live_episode(tasks: list[dict], specs: list[JobSpec], curves: LiveCurves, meta: dict, n_steps: int) -> EpisodeBatch:
    """One episode (E = 1) over ``curves``; rows are job ids (tasks are already in arrival order)."""
    ep = episodes_from_tasks([tasks], curves, meta, n_steps)
    if not np.array_equal(ep.curve_row[0, : len(tasks)], np.arange(len(tasks))):
        raise AssertionError("live tasks must be in arrival order (task index = job id)")
    return ep
