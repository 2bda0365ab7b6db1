"""MARA on job traces: a permutation-invariant network scores every live job, a fixed greedy allocator turns the
scores into GPU counts, so one checkpoint acts at every cluster size (docs/traces-target-loss.md, "MARA on traces").

At a decision the scheduler sees, per live job, what any trace scheduler of its count view sees (``JobState``):
remaining iterations as its count view gives them (the decision head's estimate for ``trace_count: predicted``),
deadline, submission time, measured speed per GPU level, GPUs held; and the cluster's GPUs. From these
``job_features`` makes ``[n, F]`` features that never name a GPU count in absolute terms (shares of the cluster, time
in hours, speed-ups), the network (``PriorityNet``: per-job encoder, mean-pooled context, per-job score) gives one
score per job, and ``allocate`` hands out GPUs:
  1. in score order, each job that can meet its deadline at a constant level gets the smallest such level (its
     minimum share) when it fits; a job with score < 0 is *deferred* (it gets nothing in this pass or the next);
  2. in score order, every job not deferred and still without GPUs gets the largest level that fits;
  3. the GPUs still free go one level step at a time to the job whose speed grows most per added GPU;
  4. what is left goes to the deferred jobs in score order (work-conserving: an estimate can be wrong).
With ``reserve`` = N > 0 (EASY backfilling), the first N jobs of pass 1 whose minimum share does not fit *reserve*
it: at the earliest time R before their deadline at which the GPUs released by the jobs already placed (at their
estimated finish times) make room for it. Every later placement (the rest of pass 1, passes 2-4) may take
GPUs only if it gives them back by R (its estimated finish at that level) or if they are spare at R (beyond the
reserved level); so a wide job is no longer overtaken for ever by the narrow jobs behind it.
Rules (``RULES``) give the same allocator hand-made scores: they are the teachers the network imitates.

Arrays ``[n]`` over the live jobs of a decision; ``F`` = len(FEATURES).
"""

from __future__ import annotations

import math
from pathlib import Path

import numpy as np
import torch
from torch import nn

from mara.core.config import SHIPPED_CKPT_DIR, ConfigError
from mara.sched.interface import Decision
from mara.traces.replay import NEVER, JobState
from mara.traces.throughput import LEVELS

FEATURES = (
    "slack_h",  # asinh of hours left after finishing at the largest level
    "load",  # time to finish at the largest level / time to deadline (clipped to 4)
    "need_share",  # minimum level that meets the deadline / cluster GPUs (2 when none does)
    "feasible",  # 1 when some level meets the deadline
    "max_share",  # largest level / cluster GPUs
    "deadline_h",  # asinh of hours to the deadline
    "wait_h",  # asinh of hours since submission
    "held",  # GPUs held / largest level
    "observed",  # share of the (estimated) work already done
    "scaling",  # speed at the largest level / (level x speed on one GPU)
    "queue",  # sum of live jobs' minimum levels / cluster GPUs (the same for every job of a decision)
    "need_gpu_h",  # asinh of GPU-hours at the minimum level (at the largest level when none meets the deadline)
    "deadline_signed_h",  # asinh of hours to the deadline, negative once it has passed
    "deadline_rank",  # the job's place in deadline order among the live jobs, 0 (first) to 1 (last)
)
F = len(FEATURES)
SHIPPED_TRACE_POLICY = SHIPPED_CKPT_DIR / "mara_trace.ckpt"  # the checkpoint method MARA runs on traces by default
RESERVE = 0  # reservations per decision of the allocator by default (training and the method), chosen on validation
PROBE = 32  # jobs per decision that, hopeless by their estimate, still get one GPU so that it can change (validation)


def min_levels(now: int, s: JobState, jobs: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """(index into LEVELS of each job's smallest level that meets its deadline at a constant rate, -1 if none;
    its largest allowed level) -> ([n], [n])."""
    tput = s.tput[jobs]  # [n, L]
    allowed = (tput > 0) & (LEVELS[None, :] <= s.n_gpus)
    top = np.where(allowed.any(axis=1), allowed.shape[1] - 1 - np.argmax(allowed[:, ::-1], axis=1), 0)
    left = np.maximum(s.ddl[jobs] - now, 0).astype(np.float64)
    ok = allowed & (tput * left[:, None] >= np.maximum(s.iter_left[jobs], 0.0)[:, None])
    need = np.where(ok.any(axis=1), np.argmax(ok, axis=1), -1)
    return need, top


def job_features(now: int, s: JobState, jobs: np.ndarray, done: np.ndarray) -> np.ndarray:
    """Features ``[n, F]`` of live ``jobs`` (``done [n]``: iterations run so far)."""
    need, top = min_levels(now, s, jobs)
    rows = np.arange(jobs.size)
    sp_top = np.maximum(s.tput[jobs, top], 1e-9)
    sp_one = np.maximum(s.tput[jobs, 0], 1e-9)
    rem = np.maximum(s.iter_left[jobs], 0.0)
    t_top = rem / sp_top
    left = (s.ddl[jobs] - now).astype(np.float64)
    feas = need >= 0
    lvl = np.where(feas, need, top)
    need_gpus = LEVELS[lvl].astype(np.float64)
    t_need = rem / np.maximum(s.tput[jobs, lvl], 1e-9)
    N = float(s.n_gpus)
    x = np.empty((jobs.size, F))
    x[:, 0] = np.arcsinh((left - t_top) / 3600.0)
    x[:, 1] = np.clip(t_top / np.maximum(left, 1.0), 0.0, 4.0)
    x[:, 2] = np.where(feas, need_gpus / N, 2.0)
    x[:, 3] = feas
    x[:, 4] = LEVELS[top] / N
    x[:, 5] = np.arcsinh(np.maximum(left, 0.0) / 3600.0)
    x[:, 6] = np.arcsinh((now - s.submit[jobs]) / 3600.0)
    x[:, 7] = s.gpus[jobs] / LEVELS[top]
    x[:, 8] = done / np.maximum(done + rem, 1.0)
    x[:, 9] = sp_top / (LEVELS[top] * sp_one)
    x[:, 10] = need_gpus[feas].sum() / N
    x[:, 11] = np.arcsinh(need_gpus * t_need / 3600.0)
    x[:, 12] = np.arcsinh(left / 3600.0)
    rank = np.empty(jobs.size)
    rank[np.lexsort((jobs, s.ddl[jobs]))] = np.arange(jobs.size)
    x[:, 13] = rank / max(jobs.size - 1, 1)
    del rows
    return x


class PriorityNet(nn.Module):
    """Per-job scores from job features: encoder, mean-pooled context, scorer. ``x [n, F] -> [n]``; invariant to
    the order of the jobs and to their number."""

    def __init__(self, hidden: int = 32):
        super().__init__()
        self.enc = nn.Sequential(nn.Linear(F, hidden), nn.Tanh(), nn.Linear(hidden, hidden), nn.Tanh())
        self.head = nn.Sequential(nn.Linear(2 * hidden, hidden), nn.Tanh(), nn.Linear(hidden, 1))

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        h = self.enc(x)
        ctx = h.mean(dim=0, keepdim=True).expand_as(h)
        return self.head(torch.cat([h, ctx], dim=-1)).squeeze(-1)


def rule_scores(rule: str, x: np.ndarray, ddl: np.ndarray) -> np.ndarray:
    """Hand-made scores ``[n]`` (higher first; < 0 deferred) of a teacher rule on features ``x [n, F]``."""
    n = x.shape[0]
    rank = np.empty(n)
    feas = x[:, 3] > 0
    if rule == "edf":  # deadline order, nothing deferred
        key = ddl.astype(np.float64)
        defer = np.zeros(n, dtype=bool)
    elif rule == "slack":  # least slack first among jobs that can still make it; hopeless ones deferred
        key = x[:, 0]
        defer = ~feas
    elif rule == "edf_feasible":  # deadline order among jobs that can still make it; hopeless ones deferred
        key = ddl.astype(np.float64)
        defer = ~feas
    elif rule == "cheapest":  # fewest GPU-hours at the minimum share first; hopeless ones deferred
        key = x[:, 11]
        defer = ~feas
    else:
        raise ValueError(f"unknown trace rule {rule!r} (rules: {', '.join(RULES)})")
    order = np.lexsort((np.arange(n), key))
    rank[order] = np.arange(n)
    return np.where(defer, -1.0 - rank / max(n, 1), 1.0 + (n - rank) / max(n, 1))


RULES = ("edf", "edf_feasible", "slack", "cheapest")


def allocate(
    now: int, s: JobState, jobs: np.ndarray, scores: np.ndarray, reserve: int = 0, probe: int = 0
) -> np.ndarray:
    """GPUs ``[n]`` (each 0 or a level) for live ``jobs`` from their ``scores [n]`` (the four passes above;
    ``reserve``: how many jobs passed over in pass 1 may hold a reservation, 0 none; ``probe``: how many jobs not
    deferred that no level makes meet their deadline by the estimate get one GPU in pass 1, at their place in score
    order, before their deadline: a job without GPUs shows no new loss, so its estimate cannot change)."""
    need, top = min_levels(now, s, jobs)
    order = np.lexsort((np.arange(jobs.size), -scores))
    gpus = np.zeros(jobs.size, dtype=np.int64)
    free = int(s.n_gpus)
    keep = scores >= 0
    book = _Reservations(now, s, jobs, free) if reserve > 0 else None
    probes = 0
    for i in order:  # 1: minimum shares
        if free == 0:
            break
        if keep[i] and need[i] < 0 and probes < probe and s.ddl[jobs[i]] > now:
            if book is None or book.allows(i, 1):
                gpus[i] = 1
                free -= 1
                probes += 1
                if book is not None:
                    book.place(i, 1)
        elif keep[i] and need[i] >= 0:
            g = int(LEVELS[need[i]])
            if g <= free and (book is None or book.allows(i, g)):
                gpus[i] = g
                free -= g
                if book is not None:
                    book.place(i, g)
            elif g > free and book is not None and len(book.held) < reserve:
                book.reserve(i, g, free)
    for i in order:  # 2: the rest of the jobs not deferred, the largest level that fits
        if free == 0:
            break
        if keep[i] and gpus[i] == 0:
            gpus[i] = _fit(free, LEVELS[top[i]]) if book is None else book.largest(i, free, int(LEVELS[top[i]]))
            free -= gpus[i]
            if book is not None and gpus[i] > 0:
                book.place(i, int(gpus[i]))
    if free > 0:  # 3: speed-up per added GPU
        free = _grow(s, jobs, top, gpus, free, book)
    for i in order:  # 4: deferred jobs
        if free == 0:
            break
        if gpus[i] == 0:
            gpus[i] = _fit(free, LEVELS[top[i]]) if book is None else book.largest(i, free, int(LEVELS[top[i]]))
            free -= gpus[i]
            if book is not None and gpus[i] > 0:
                book.place(i, int(gpus[i]))
    return gpus


class _Reservations:
    """EASY-backfilling book of one decision: the jobs placed so far with their estimated finish times, and the
    reservations (time R, GPUs spare at R beyond the reserved level) that later placements must respect."""

    def __init__(self, now: int, s: JobState, jobs: np.ndarray, free: int):
        self.now, self.s, self.jobs, self.free0 = now, s, jobs, free
        self.fin: dict[int, tuple[float, int]] = {}  # placed job -> (estimated finish, GPUs)
        self.held: list[list] = []  # [R, spare GPUs at R, reserving job, reserved GPUs]

    def finish(self, i: int, g: int) -> float:
        """Estimated finish of job ``i`` on ``g`` GPUs from now."""
        j = self.jobs[i]
        sp = self.s.tput[j, int(LEVELS.searchsorted(g))]
        return self.now + max(self.s.iter_left[j], 0.0) / sp if sp > 0 else math.inf

    def allows(self, i: int, g: int, extra: int | None = None) -> bool:
        """Whether job ``i`` may hold ``g`` GPUs (``extra`` of them added to what it holds) without delaying any
        reservation made by another job."""
        f = self.finish(i, g)
        add = g if extra is None else extra
        return all(r[2] == i or f <= r[0] or add <= r[1] for r in self.held)

    def place(self, i: int, g: int, extra: int | None = None) -> None:
        """Record job ``i`` on ``g`` GPUs (``extra`` added now): what it holds past a reservation's R is not spare."""
        f = self.finish(i, g)
        add = g if extra is None else extra
        for r in self.held:
            if r[2] != i and f > r[0]:
                r[1] -= add
        self.fin[i] = (f, g)

    def largest(self, i: int, free: int, cap: int) -> int:
        """The largest level <= min(free, cap) that job ``i`` may hold (0: none)."""
        g = _fit(free, cap)
        while g >= 1 and not self.allows(i, g):
            g //= 2
        return g

    def reserve(self, i: int, g: int, free: int) -> None:
        """Reserve ``g`` GPUs (its minimum share now) for job ``i`` at the earliest estimated time, before its
        deadline, when the jobs placed so far have released enough (none if no such time)."""
        placed = sorted(self.fin.values())
        ts = [float(self.now)] + [f for f, _ in placed]
        rel = np.cumsum([0] + [h for _, h in placed])
        for t, released in zip(ts, rel):
            if not math.isfinite(t) or t >= self.s.ddl[self.jobs[i]]:
                return
            avail = free + int(released) - sum(r[3] for r in self.held if r[0] <= t)
            later = [r for r in self.held if r[0] > t]  # it would hold g GPUs through their R too
            if g <= avail and all(g <= r[1] for r in later):
                for r in later:
                    r[1] -= g
                self.held.append([t, avail - g, i, g])
                return


def _fit(free: int, cap: int) -> int:
    """The largest level <= min(free, cap) (0 if free is 0)."""
    g = int(min(free, int(cap)))
    return 0 if g < 1 else 1 << (g.bit_length() - 1)


def _grow(
    s: JobState, jobs: np.ndarray, top: np.ndarray, gpus: np.ndarray, free: int, book: _Reservations | None = None
) -> int:
    """Give ``free`` GPUs one level step at a time to held jobs, largest relative speed-up per GPU first (``book``:
    only steps that respect its reservations)."""
    held = np.flatnonzero(gpus > 0)
    if held.size == 0:
        return free
    tput = s.tput[jobs[held]]
    lvl = LEVELS.searchsorted(gpus[held])
    while free > 0:
        nxt = lvl + 1
        can = (nxt <= top[held]) & (LEVELS[np.minimum(nxt, len(LEVELS) - 1)] - LEVELS[lvl] <= free)
        if book is not None:
            for k in np.flatnonzero(can):
                step = int(LEVELS[nxt[k]] - LEVELS[lvl[k]])
                can[k] = book.allows(int(held[k]), int(LEVELS[nxt[k]]), step)
        if not can.any():
            break
        r = np.arange(held.size)
        gain = (tput[r, np.minimum(nxt, len(LEVELS) - 1)] / np.maximum(tput[r, lvl], 1e-9) - 1.0) / LEVELS[lvl]
        gain = np.where(can, gain, -np.inf)
        b = int(np.argmax(gain))
        if gain[b] <= 0:
            break
        free -= int(LEVELS[lvl[b] + 1] - LEVELS[lvl[b]])
        if book is not None:
            book.place(int(held[b]), int(LEVELS[lvl[b] + 1]), int(LEVELS[lvl[b] + 1] - LEVELS[lvl[b]]))
        lvl[b] += 1
        gpus[held[b]] = LEVELS[lvl[b]]
    return free


def load_policy(path) -> PriorityNet:
    """The network of a trace-policy checkpoint (tensors and plain data only: loaded with weights_only=True)."""
    ck = torch.load(str(path), map_location="cpu", weights_only=True)
    net = PriorityNet(int(ck["hidden"]))
    net.load_state_dict(ck["state_dict"])
    net.eval()
    return net


class TraceMARA:
    """The trace scheduler of method ``MARA``: network scores (or a teacher rule's), the greedy allocator above.

    ``ckpt_path``: a trace-policy checkpoint (null: the shipped one); ``rule``: score with a teacher rule instead of
    the network; ``sample``: add Gumbel noise to the scores (Plackett–Luce order; training only). ``record``: a list
    that receives (features, scores' order, deferred) of every decision with live jobs (imitation data).
    ``reserve``: how many jobs passed over per decision hold an EASY-backfilling reservation (0: none; null:
    ``RESERVE``); ``probe``: how many jobs hopeless by their estimate get one GPU per decision (null: ``PROBE``)."""

    name = "MARA"
    caps = "table"

    def __init__(
        self,
        ckpt_path=None,
        rule: str | None = None,
        sample: bool = False,
        seed: int = 0,
        net: PriorityNet | None = None,
        record: list | None = None,
        noise: float = 1.0,
        overhead: bool = True,
        reserve: int | None = None,
        probe: int | None = None,
    ):
        if rule is not None and rule not in RULES:
            raise ValueError(f"unknown trace rule {rule!r} (rules: {', '.join(RULES)})")
        reserve = RESERVE if reserve is None else reserve
        if isinstance(reserve, bool) or not isinstance(reserve, int) or reserve < 0:
            raise ConfigError(f"MARA trace_scheduler.reserve must be an integer >= 0, got {reserve!r}")
        probe = PROBE if probe is None else probe
        if isinstance(probe, bool) or not isinstance(probe, int) or probe < 0:
            raise ConfigError(f"MARA trace_scheduler.probe must be an integer >= 0, got {probe!r}")
        self.reserve, self.probe = reserve, probe
        self.rule, self.sample, self.record, self.noise, self.overhead = rule, sample, record, noise, overhead
        self.rng = np.random.default_rng(seed)
        if net is None and rule is None:
            path = Path(ckpt_path) if ckpt_path else SHIPPED_TRACE_POLICY
            if not path.is_file():
                raise ConfigError(
                    f"MARA trace policy checkpoint {path} not found (train one: python -m mara.train "
                    "experiment=trace_mara)"
                )
            net = load_policy(path)
            torch.set_num_threads(1)  # a 3,649-parameter network per decision: more threads only contend for cores
        self.net = net

    def start(self, state: JobState) -> None:
        self.s = state
        self.done = np.zeros(len(state.submit))
        self.last_t, self.last_g = None, np.zeros(len(state.submit), dtype=np.int64)
        self.started_once = np.zeros(len(state.submit), dtype=bool)
        self.last_oh = np.zeros(len(state.submit))
        self.base = 7 if state.n_gpus >= 256 else 2  # ElasticFlow's set-up seconds per decision, charged alike

    def scores(self, now: int, jobs: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        """(features [n, F], scores [n]) of live ``jobs``."""
        x = job_features(now, self.s, jobs, self.done[jobs])
        if self.rule is not None:
            return x, rule_scores(self.rule, x, self.s.ddl[jobs])
        with torch.no_grad():
            sc = self.net(torch.as_tensor(x, dtype=torch.float32)).numpy().astype(np.float64)
        return x, sc

    def decide(self, now: int, arrivals: np.ndarray):
        """Admit every arrival; set every live job's GPUs from the scores; no re-plan time of its own."""
        s = self.s
        if self.last_t is not None:  # iterations run since the last decision, as the scheduler can count them
            run = np.flatnonzero(self.last_g > 0)
            ran = np.maximum(now - self.last_t - self.last_oh[run], 0.0)
            self.done[run] += s.tput[run, LEVELS.searchsorted(self.last_g[run])] * ran
        present = s.present
        present[arrivals] = True
        live = np.flatnonzero(present)
        self.last_t = now
        self.last_g = np.zeros(len(s.submit), dtype=np.int64)
        if live.size == 0:
            return Decision(admit=arrivals)
        x, sc = self.scores(now, live)
        if self.sample:
            sc = sc + self.noise * self.rng.gumbel(size=sc.shape)
        if self.record is not None:
            self.record.append((x.astype(np.float32), np.lexsort((np.arange(live.size), -sc)), sc < 0))
        g = allocate(now, s, live, sc, self.reserve, self.probe)
        self.last_g[live] = g
        self.last_oh = s.overhead.copy()
        finish = np.full(live.size, np.nan)  # waiting or preempted: its planned finish stays, it has no end event
        for i in np.flatnonzero(g > 0):
            j = live[i]
            sp = s.speed(j, int(g[i]))
            oh = 0.0
            if self.overhead:  # set-up seconds as ElasticFlow is charged: every decision, more at a first start
                oh = self.base + (0.0 if self.started_once[j] else 2.0 * (math.log2(int(g[i])) + 1.0))
            self.started_once[j] = True
            self.last_oh[j] = oh
            finish[i] = math.ceil(now + oh + max(s.iter_left[j], 0.0) / sp) if sp > 0 else NEVER
        return Decision(jobs=live, gpus=g, finish=finish, overhead=self.last_oh[live], admit=arrivals)
