"""The predictor-guided least-slack rule, one class for every engine: ``Slack-FM`` / ``Slack-WLS`` / ``Slack-QR-q`` /
``Slack-Truth``. Its order is ``mara.sched.slack.slack_keys``; the trace engine's GPUs per job are
``mara.sched.slack.slack_allocation`` (that module's docstring); the batched engine's are below.

Each step, per episode, every present task whose generation cap is not used up is put in one of three
stages and the M nodes go to the tasks in stage order, one node per task (work-conserving):

1. **finishable** — warm (``n_obs >= warm_obs``) and predicted to finish in time, ``p̂ ≤ τ``
   (p̂ = ``obs.pred_remaining``, τ = ``obs.remaining_time``): least slack ``τ − p̂`` first;
2. **cold** — fewer than ``warm_obs`` observations, or a cold estimate the predictor could not give
   (``obs.no_estimate``): earliest deadline first;
3. **hopeless** — warm with ``p̂ > τ``: earliest deadline first.

Ties: earlier deadline, then earlier arrival (task index). The ordering key is a pure function
(``slack_keys``); ``SlackRule.act`` sorts all episodes at once.

On a trace (``start`` / ``decide``, the scheduler interface) the rule reads each job's ``iter_left`` as its remaining
iterations: the truth (``Slack-Truth``) or, wrapped by mara/traces/target_run.py's ``PredictedCount``, a predictor's
estimate (``Slack-QR-q``); a job is finishable when its slack is at least ``margin`` × its time to deadline. Set-up
overhead as ElasticFlow's simulator charges it (mara/traces/elasticflow.py), so that the two pay the same for
elasticity.

Band-aware variant (``Slack-FM-q``): with ``quantile: q`` the finishable test reads the q-quantile of
the predictor's band instead of its median (``band_quantile``: a split log-normal through the band's q10 / q50 /
q90 in log1p batches), and ``slack_at`` says which estimate the least-slack order reads (``median`` or
``quantile``). ``quantile: null`` is the plain rule.
"""

from __future__ import annotations

import math
from statistics import NormalDist

import numpy as np

from mara.allocators.placement import place
from mara.core.paths import at_least
from mara.sched.interface import NEVER, Decision
from mara.sched.slack import COLD, FINISHABLE, HOPELESS, SKIP, TraceView, slack_allocation, slack_keys
from mara.sim.env import IDLE, WARMUP_OBS, Observation

__all__ = ["COLD", "FINISHABLE", "HOPELESS", "SKIP", "SlackRule", "band_quantile", "slack_keys", "slack_stage"]


def slack_stage(present, cap_remaining, n_obs, pred, tau, warm_obs: int = WARMUP_OBS, no_estimate=None) -> np.ndarray:
    """Stage of every slot [E, K]: FINISHABLE, COLD, HOPELESS, or SKIP (absent or cap exhausted); a slot with
    ``no_estimate`` [E, K] (a cold task its predictor could not answer) stays COLD whatever ``warm_obs``."""
    servable = present & (cap_remaining > 0)
    warm = n_obs >= warm_obs
    if no_estimate is not None:
        warm = warm & ~no_estimate
    stage = np.where(warm, np.where(pred <= tau, FINISHABLE, HOPELESS), COLD)
    return np.where(servable, stage, SKIP)


def band_quantile(lo, med, hi, q: float, band=(0.1, 0.9)) -> np.ndarray:
    """The q-quantile of a band given by its lower quantile ``lo`` (at ``band[0]``), median and upper quantile ``hi``
    (at ``band[1]``): a split normal in log1p space (each side's scale fixed by its own band end), so
    q = band[0] gives lo, 0.5 the median, band[1] hi, and quantiles outside the band extrapolate. Values ≥ 0."""
    if not 0.0 < q < 1.0:
        raise ValueError(f"quantile must lie in (0, 1), got {q}")
    m = np.log1p(np.maximum(np.asarray(med, dtype=np.float64), 0.0))
    z = NormalDist().inv_cdf(q)
    if q == 0.5:
        return np.expm1(m)
    end, zb = (lo, NormalDist().inv_cdf(band[0])) if q < 0.5 else (hi, NormalDist().inv_cdf(band[1]))
    e = np.log1p(np.maximum(np.asarray(end, dtype=np.float64), 0.0))
    return np.maximum(np.expm1(m + (z / zb) * (e - m)), 0.0)


def fastest_node_steps(obs: Observation, pred: np.ndarray) -> np.ndarray:
    """Heterogeneous nodes: the predicted remaining batches in steps on the fastest node (``pred /
    max(node_speed)``), so a task is finishable when it could still finish there and its slack is counted in those
    steps; ``pred`` itself on identical unit-speed nodes. (Chosen on validation roots 100-101: without it tasks
    only a fast node can still save are ranked hopeless.) The nodes themselves are assigned by
    ``placement.place``."""
    if not getattr(obs, "hetero", False):
        return pred
    return pred / float(np.max(obs.node_speed))


class SlackRule:
    """Least-slack-first over predicted-finishable tasks, then cold, then hopeless tasks (module docstring)."""

    name = "Slack"

    def __init__(
        self,
        warm_obs: int = WARMUP_OBS,
        name: str | None = None,
        quantile: float | None = None,
        slack_at: str = "median",
        band=(0.1, 0.9),
        displace: bool = False,
        displace_margin: int = 0,
        displace_at: str = "median",
        margin: float = 0.0,
        caps: str = "elasticflow",
        overhead: bool = True,
    ) -> None:
        if not math.isfinite(float(margin)) or float(margin) < 0 or float(margin) >= 1:
            raise ValueError(f"Slack.margin must lie in [0, 1), got {margin!r}")
        if caps not in ("elasticflow", "table"):
            raise ValueError(f"Slack.caps must be elasticflow or table, got {caps!r}")
        # on traces: finishable with ``margin`` x time to deadline to spare; GPU caps per job; set-up seconds charged
        self.margin, self.caps, self.overhead = float(margin), caps, bool(overhead)
        at_least("Slack.warm_obs", warm_obs, 1)
        if quantile is not None and not 0.0 < float(quantile) < 1.0:
            raise ValueError(f"Slack.quantile must lie in (0, 1) or be null, got {quantile}")
        if slack_at not in ("median", "quantile"):
            raise ValueError(f"Slack.slack_at must be 'median' or 'quantile', got {slack_at!r}")
        self.warm_obs = int(warm_obs)
        self.quantile = None if quantile is None else float(quantile)
        self.slack_at, self.band = slack_at, (float(band[0]), float(band[1]))
        at_least("Slack.displace_margin", displace_margin, 0)
        if displace_at not in ("median", "upper"):
            raise ValueError(f"Slack.displace_at must be 'median' or 'upper', got {displace_at!r}")
        # the placement's displacement move on unequal nodes (placement.py): the displaced task must keep
        # ``displace_margin`` steps to spare, judged at the median or at the band's upper end
        self.displace, self.displace_margin, self.displace_at = bool(displace), int(displace_margin), displace_at
        if name:
            self.name = name

    only_tasks = None  # [E, N] bool or None: the tasks this rule may serve (restrict_to)

    def reset(self, n_episodes: int) -> None:
        pass

    def restrict_to(self, tasks: np.ndarray | None) -> None:
        """Serve only ``tasks`` ([E, N] bool by arrival index; None: all) — the others are skipped as if absent. A
        privileged hook for the selection bound (method Slack-Truth-chosen: the tasks the Clairvoyant completes)."""
        self.only_tasks = None if tasks is None else np.asarray(tasks, dtype=bool)

    def act(self, obs: Observation) -> np.ndarray:
        picks, pred = self.choose(obs)
        upper = self.displace and self.displace_at == "upper" and getattr(obs, "hetero", False)
        return place(
            obs,
            picks,
            pred,
            displace=self.displace,
            margin=self.displace_margin,  # identity on identical nodes
            remaining_displaced=obs.pred_remaining_hi if upper else None,
        )

    def choose(self, obs: Observation) -> tuple[np.ndarray, np.ndarray]:
        """(picks [E, M]: the served slots in priority order, IDLE after; the median estimate the placement reads).
        On identical nodes the picks are the actions; ``act`` places them. Imitation clones the picks."""
        tau = obs.remaining_time.astype(np.float64)
        pred = np.nan_to_num(np.asarray(obs.pred_remaining, dtype=np.float64), nan=np.inf)
        feas = pred
        if self.quantile is not None:
            feas = np.nan_to_num(
                band_quantile(obs.pred_remaining_lo, pred, obs.pred_remaining_hi, self.quantile, self.band), nan=np.inf
            )
        feas_steps = fastest_node_steps(obs, feas)  # == feas on the paper's identical nodes
        stage = slack_stage(
            obs.present, obs.cap_remaining, obs.n_obs, feas_steps, tau, self.warm_obs, getattr(obs, "no_estimate", None)
        )
        if self.only_tasks is not None:
            rows = np.arange(stage.shape[0])[:, None]
            allowed = (
                obs.present & self.only_tasks[rows, np.maximum(obs.task, 0)]
            )  # absent slots (-1): masked by present
            stage = np.where(allowed, stage, SKIP)
        keys = slack_keys(
            stage,
            feas_steps if self.slack_at == "quantile" else fastest_node_steps(obs, pred),
            tau,
            obs.deadline,
            obs.task,
        )
        order = np.lexsort(tuple(reversed(keys)), axis=-1)  # lexsort: last key is primary
        M = obs.n_nodes
        m = min(M, order.shape[1])
        top = order[:, :m]
        ok = np.take_along_axis(stage, top, axis=1) != SKIP
        actions = np.full((order.shape[0], M), IDLE, dtype=np.int64)
        actions[:, :m] = np.where(ok, top, IDLE)
        return actions, pred

    # the trace engine
    def start(self, state) -> None:
        self.s = state
        self.started_once = np.zeros(len(state.submit), dtype=bool)
        self.base = 7 if state.n_gpus >= 256 else 2

    def view(self, now: int, live: np.ndarray) -> TraceView:
        """The observable view of the jobs ``live`` (indices) at ``now``."""
        s = self.s
        return TraceView(
            now=float(now),
            remaining=s.iter_left[live].astype(np.float64),
            deadline=s.ddl[live].astype(np.float64),
            tput=s.tput[live],
            n_gpus=int(s.n_gpus),
        )

    def decide(self, now: int, arrivals: np.ndarray) -> Decision:
        """Admit every arrival (deferral is soft); GPUs, finishes and set-up seconds; no re-plan time of its own."""
        s = self.s
        present = s.present
        present[arrivals] = True
        live = np.flatnonzero(present)
        if live.size == 0:
            return Decision(admit=arrivals)
        g = slack_allocation(self.view(now, live), self.margin)
        finish = np.full(live.size, NEVER)  # waiting or preempted: its end moves to when it runs again
        oh = s.overhead[live].copy()
        for i in np.flatnonzero(g > 0):
            j, gj = live[i], int(g[i])
            if self.overhead:
                oh[i] = self.base + (0.0 if self.started_once[j] else 2.0 * (math.log2(gj) + 1))
            else:
                oh[i] = 0.0
            self.started_once[j] = True
            finish[i] = now + oh[i] + math.ceil(max(float(s.iter_left[j]), 0.0) / s.speed(j, gj))
        return Decision(jobs=live, gpus=g, finish=finish, overhead=oh, admit=arrivals)
