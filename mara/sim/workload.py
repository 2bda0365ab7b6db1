"""Workloads: task sets, loads and roots → episodes (docs/architecture.md).

An evaluation root fixes every random draw of its episodes: each episode's generator is
``SeedSequence(root, spawn_key=(crc32(task_set), round(load·1e4), episode))``. Episodes are returned
as padded arrays ``[E, N]`` (episodes × tasks, tasks sorted by arrival; ``valid = j < n_tasks``).
"""

from __future__ import annotations

import zlib
from dataclasses import dataclass, field

import numpy as np

from mara.curves.bank import NEVER, BankError, CurveBank
from mara.curves.calibrate import sample_eps_budget
from mara.curves.families import ID_FAMILIES, validate_family_params


@dataclass(frozen=True)
class TaskSet:
    """Which families arrive: uniform over ``families``; each arrival replaced by ``ood_family`` w.p. ``ood_prob``."""

    name: str
    families: tuple[str, ...] = ID_FAMILIES
    ood_family: str | None = None
    ood_prob: float = 0.0

    @property
    def all_families(self) -> tuple[str, ...]:
        return self.families + ((self.ood_family,) if self.ood_family else ())


PAPER_TASK_SETS = {
    "ID": TaskSet("ID"),
    "RL_OOD": TaskSet("RL_OOD", ood_family="RLExpertConfig", ood_prob=0.2),
    "ViT_OOD": TaskSet("ViT_OOD", ood_family="ViT_Cifar10_1", ood_prob=0.2),
}


@dataclass
class EpisodeBatch:
    """E episodes of up to N tasks each (padded), with every quantity the simulator needs."""

    n_tasks: np.ndarray  # [E] int
    arrival: np.ndarray  # [E, N] int step of arrival (padding: large)
    deadline: np.ndarray  # [E, N] int, = arrival + budget; executable steps are arrival <= t < deadline
    budget: np.ndarray  # [E, N] int
    eps: np.ndarray  # [E, N] float target loss
    need: np.ndarray  # [E, N] int batches to first reach eps (NEVER if never)
    curve_row: np.ndarray  # [E, N] int row in the bank
    cap: np.ndarray  # [E, N] int generation cap (curve length)
    batch_size: np.ndarray  # [E, N] int
    lr: np.ndarray  # [E, N] float
    family: np.ndarray  # [E, N] str family name ('' for padding)
    task_set: list[str] = field(default_factory=list)  # [E]
    load: np.ndarray | None = None  # [E] float
    root: np.ndarray | None = None  # [E] int
    episode: np.ndarray | None = None  # [E] int
    n_steps: int = 500  # arrival window T

    @property
    def E(self) -> int:
        return len(self.n_tasks)

    @property
    def N(self) -> int:
        return self.arrival.shape[1]

    @property
    def valid(self) -> np.ndarray:
        return np.arange(self.N)[None, :] < self.n_tasks[:, None]

    @property
    def horizon(self) -> int:
        """Last step after which nothing can be active (max deadline)."""
        return int(np.max(np.where(self.valid, self.deadline, 0), initial=0))

    def oracle_successes(self) -> np.ndarray:
        """Independent feasibility per episode: tasks whose curve reaches ε within their budget in isolation. [E]"""
        return ((self.need <= self.budget) & self.valid).sum(axis=1)

    def take(self, idx) -> "EpisodeBatch":
        """The episodes ``idx`` [k] (same padding N), e.g. one DDP rank's share."""
        from dataclasses import fields

        idx = np.asarray(idx, np.int64)
        kw = {}
        for f in fields(self):
            v = getattr(self, f.name)
            kw[f.name] = (
                v[idx] if isinstance(v, np.ndarray) else [v[i] for i in idx] if isinstance(v, list) and v else v
            )
        return EpisodeBatch(**kw)

    @staticmethod
    def concat(batches: list["EpisodeBatch"]) -> "EpisodeBatch":
        """Stack episode batches (padding to the largest N)."""
        n = max(b.N for b in batches)

        def pad(a, fill):
            out = np.full((a.shape[0], n), fill, dtype=a.dtype)
            out[:, : a.shape[1]] = a
            return out

        cat = lambda name, fill: np.concatenate([pad(getattr(b, name), fill) for b in batches])  # noqa: E731
        return EpisodeBatch(
            n_tasks=np.concatenate([b.n_tasks for b in batches]),
            arrival=cat("arrival", _PAD_T),
            deadline=cat("deadline", _PAD_T),
            budget=cat("budget", 0),
            eps=cat("eps", 0.0),
            need=cat("need", NEVER),
            curve_row=cat("curve_row", 0),
            cap=cat("cap", 1),
            batch_size=cat("batch_size", 1),
            lr=cat("lr", 0.0),
            family=np.concatenate([pad(b.family.astype("<U32"), "") for b in batches]),
            task_set=sum((list(b.task_set) for b in batches), []),
            load=np.concatenate([b.load for b in batches]),
            root=np.concatenate([b.root for b in batches]),
            episode=np.concatenate([b.episode for b in batches]),
            n_steps=max(b.n_steps for b in batches),
        )


_PAD_T = np.iinfo(np.int32).max // 2


def episode_rng(root: int, task_set: str, load: float, episode: int) -> np.random.Generator:
    """The generator that fixes every draw of one episode."""
    key = (zlib.crc32(task_set.encode()), int(round(load * 10000)), int(episode))
    return np.random.default_rng(np.random.SeedSequence(int(root), spawn_key=key))


def episodes_from_tasks(
    tasks: list[list[dict]], bank: CurveBank, meta: dict | None = None, n_steps: int = 500
) -> EpisodeBatch:
    """Pack per-episode task dicts (arrival, budget, eps, curve_row, family; optional cap, else the curve's length)."""
    E = len(tasks)
    meta = meta or {"task_set": ["custom"] * E, "load": [0.0] * E, "root": [0] * E, "episode": list(range(E))}
    N = max(1, max((len(t) for t in tasks), default=1))
    b = EpisodeBatch(
        n_tasks=np.array([len(t) for t in tasks], dtype=np.int64),
        arrival=np.full((E, N), _PAD_T, dtype=np.int64),
        deadline=np.full((E, N), _PAD_T, dtype=np.int64),
        budget=np.zeros((E, N), dtype=np.int64),
        eps=np.zeros((E, N)),
        need=np.full((E, N), NEVER, dtype=np.int64),
        curve_row=np.zeros((E, N), dtype=np.int64),
        cap=np.ones((E, N), dtype=np.int64),
        batch_size=np.ones((E, N), dtype=np.int64),
        lr=np.zeros((E, N)),
        family=np.full((E, N), "", dtype="<U32"),
        task_set=list(meta["task_set"]),
        load=np.asarray(meta["load"], dtype=np.float64),
        root=np.asarray(meta["root"], dtype=np.int64),
        episode=np.asarray(meta["episode"], dtype=np.int64),
        n_steps=n_steps,
    )
    for e, ep in enumerate(tasks):
        if not ep:
            continue
        ep = sorted(ep, key=lambda d: d["arrival"])  # stable: keeps draw order within a step
        n = len(ep)
        rows = np.array([d["curve_row"] for d in ep])
        b.arrival[e, :n] = [d["arrival"] for d in ep]
        b.budget[e, :n] = [d["budget"] for d in ep]
        b.deadline[e, :n] = b.arrival[e, :n] + b.budget[e, :n]
        b.eps[e, :n] = [d["eps"] for d in ep]
        b.curve_row[e, :n] = rows
        b.need[e, :n] = bank.first_crossing(rows, b.eps[e, :n])
        b.cap[e, :n] = [d.get("cap", bank.lengths[r]) for d, r in zip(ep, rows)]  # live episodes fix the cap
        b.batch_size[e, :n] = bank.batch_size[rows]
        b.lr[e, :n] = bank.lr[rows]
        b.family[e, :n] = [d["family"] for d in ep]
    return b


def generate_episodes(
    bank: CurveBank,
    family_params: dict,
    task_set: TaskSet,
    load: float,
    root: int,
    n_episodes: int = 12,
    n_steps: int = 500,
    episode_offset: int = 0,
) -> EpisodeBatch:
    """Random-arrival episodes: each of ``n_steps`` steps brings a task with probability ``load``."""
    if not 0.0 <= load <= 1.0:
        raise ValueError(f"load p must lie in [0, 1], got {load}")
    validate_family_params(
        family_params, task_set.all_families, source=f"family parameters for task set {task_set.name}"
    )
    bank.require_families(task_set.all_families, "pool", context=f"task set {task_set.name}")
    pools = {f: bank.rows(f, "pool") for f in task_set.all_families}
    tasks, meta = [], {"task_set": [], "load": [], "root": [], "episode": []}
    for ep in range(episode_offset, episode_offset + n_episodes):
        rng = episode_rng(root, task_set.name, load, ep)
        arrivals = np.flatnonzero(rng.random(n_steps) < load)
        ep_tasks = []
        for t in arrivals:
            fam = task_set.families[rng.integers(len(task_set.families))]
            if task_set.ood_family is not None and rng.random() < task_set.ood_prob:
                fam = task_set.ood_family
            row = int(pools[fam][rng.integers(len(pools[fam]))])
            eps, budget = sample_eps_budget(family_params[fam], rng, 1)
            ep_tasks.append(
                {"arrival": int(t), "budget": int(budget[0]), "eps": float(eps[0]), "curve_row": row, "family": fam}
            )
        tasks.append(ep_tasks)
        meta["task_set"].append(task_set.name)
        meta["load"].append(load)
        meta["root"].append(root)
        meta["episode"].append(ep)
    return episodes_from_tasks(tasks, bank, meta, n_steps)


def generate_stress_episodes(
    bank: CurveBank,
    root: int,
    n_episodes: int = 12,
    n_infeasible: int = 7,
    n_short: int = 13,
    short_arrival: int = 10,
    infeasible_budget: int = 170,
    short_budget: int = 180,
    short_need: tuple[int, int] = (22, 35),
    families: tuple[str, ...] = ID_FAMILIES,
) -> EpisodeBatch:
    """Paper §5.4: infeasible tasks at t=0 with the earliest deadlines, then short feasible tasks.

    The infeasible tasks get a target below their curve's minimum (they never succeed); each short
    task gets ε = L(n) for n drawn in ``short_need`` on a curve whose cumulative average first
    reaches that value exactly at batch n. With the admission limit K = 10 only 3 short tasks are
    admitted at first, so a policy must stop serving the early tasks to finish all short ones; the
    defaults leave too little time after the early deadlines (170) for FIFO/EDF to finish any, while
    every list schedule through the 3 free slots finishes all short tasks by their deadline (190).
    """
    if short_budget - (infeasible_budget - short_arrival) >= short_need[0]:
        raise ValueError("stress scenario: short tasks would still fit after the early deadlines")
    bank.require_families(families, "pool", context="the stress scenario")
    pools = np.concatenate([bank.rows(f, "pool") for f in families])
    tasks, meta = [], {"task_set": [], "load": [], "root": [], "episode": []}
    for ep in range(n_episodes):
        rng = episode_rng(root, "stress", 0.0, ep)
        ep_tasks = []
        for _ in range(n_infeasible):
            row = int(pools[rng.integers(len(pools))])
            eps = 0.5 * float(np.nanmin(bank.L[row]))
            ep_tasks.append(
                {"arrival": 0, "budget": infeasible_budget, "eps": eps, "curve_row": row, "family": bank.family[row]}
            )
        while len(ep_tasks) < n_infeasible + n_short:
            row = int(pools[rng.integers(len(pools))])
            n = int(rng.integers(short_need[0], short_need[1] + 1))
            L = bank.L[row]
            if bank.lengths[row] < n or not np.all(L[: n - 1] > L[n - 1]):
                continue  # the curve must first reach L(n) exactly at batch n
            ep_tasks.append(
                {
                    "arrival": short_arrival,
                    "budget": short_budget,
                    "eps": float(L[n - 1]),
                    "curve_row": row,
                    "family": bank.family[row],
                }
            )
        tasks.append(ep_tasks)
        meta["task_set"].append("stress")
        meta["load"].append(0.0)
        meta["root"].append(root)
        meta["episode"].append(ep)
    batch = episodes_from_tasks(tasks, bank, meta, n_steps=short_arrival + 1)
    return batch


def check_family_params_cover(bank: CurveBank, family_params: dict | None, families, where: str) -> dict:
    """Resolve the ε/budget table: the given one, else the bank's own calibrated table."""
    table = family_params if family_params is not None else bank.family_params
    if table is None:
        raise BankError(
            f"curve bank {bank.path}: carries no calibrated family_params; pass family_params=paper or "
            "calibrate the bank"
        )
    validate_family_params(table, families, source=where)
    return table
