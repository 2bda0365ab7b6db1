"""One-step search over placements on unequal nodes: ``Plan-QR`` (futures sampled from the predictor's band) and
``Plan-Truth`` (the true remaining batches: a privileged bound beside Slack-Truth).

Shapes: ``[E, K]`` episodes × slots, ``[E, M]`` episodes × nodes, ``[R, K]`` rollout rows × slots.

Each step the least-slack rule chooses the tasks and the shared placement places them (``placement.place``): the
*greedy* candidate. The other candidates swap the nodes of two chosen warm tasks on nodes of different speed —
a task ``a`` on a slower node and a task ``b`` on a faster one — when the swap can pay: under the predictor's band
``a`` misses its deadline where it is at the band's upper end and makes it on the faster node at its lower end
(with the truth predictor the band is a point, and this is exactly the displacement move's test for ``a``). Every
candidate is scored by rolling the present tasks forward ``horizon`` steps (no arrivals, no admissions; the rule and
the greedy placement act in the rollout as they would, reading their own estimate counted down with service) and
counting the tasks that reach their sampled remaining batches before their deadline, averaged over ``samples``
futures. The futures are the same for every candidate (common random numbers): per task a standard-normal draw
``z`` gives the remaining batches ``band_sample(lo, median, hi, z)`` (the split log-normal of
``slack.band_quantile``); cold tasks (no estimate yet) need their generation cap's remainder, as the rule reads it.
With ``displace`` the rule's own placement (the first candidate, and the rollouts' placement) includes the displacement
move (``displace_at`` as in ``SlackRule``). The current placement wins ties (a swap must gain more than
``min_gain`` expected successes): a search that breaks ties towards finishing sooner makes tasks trade nodes back
and forth and pays the switch cost for nothing.

With ``arrivals`` the rollouts also admit the tasks that would join meanwhile (``TaskProfiles``): the queued ones,
then new ones at the episode's arrival rate so far, each a profile of a task this episode has already shown (steps to
its deadline, cap, its whole demand drawn from its band), cold until its warm-up observations as in the simulator.
Without them a displaced task looks able to recover on the nodes that finishing tasks free; with them those nodes go
to newcomers too.

The planner reads only the observation, so ``Plan-QR`` is a schedule anyone could run; ``Plan-Truth`` is it fed the
true remaining batches (``predictor: truth``), a privileged bound. ``timing`` holds the seconds spent in ``act``
and the episode-decisions made (ms per decision = 1000 · seconds / decisions).
"""

from __future__ import annotations

import time
from statistics import NormalDist

import numpy as np

from mara.allocators.placement import assign_nodes, demand, displace_running
from mara.allocators.slack import SKIP, SlackRule, slack_keys, slack_stage
from mara.core.paths import at_least
from mara.sim.env import IDLE, WARMUP_OBS, Observation


def band_sample(lo, med, hi, z, band=(0.1, 0.9)) -> np.ndarray:
    """Remaining batches at standard-normal draws ``z`` (any shape broadcasting with the band) from the split
    log-normal through the band's lower end, median and upper end (``slack.band_quantile`` at ``Φ(z)``). Values ≥ 0."""
    m = np.log1p(np.maximum(np.asarray(med, dtype=np.float64), 0.0))
    e_lo = np.log1p(np.maximum(np.asarray(lo, dtype=np.float64), 0.0))
    e_hi = np.log1p(np.maximum(np.asarray(hi, dtype=np.float64), 0.0))
    z = np.asarray(z, dtype=np.float64)
    z_lo, z_hi = NormalDist().inv_cdf(band[0]), NormalDist().inv_cdf(band[1])
    x = np.where(z < 0, m + (z / z_lo) * (e_lo - m), m + (z / z_hi) * (e_hi - m))
    return np.maximum(np.expm1(x), 0.0)


def rollout_successes(
    actions,
    need,
    est,
    warm,
    tau,
    cap,
    deadline,
    task,
    last,
    started,
    setup,
    node_speed,
    switch_cost: int,
    horizon: int,
    displace: bool = False,
    arrivals: dict | None = None,
) -> np.ndarray:
    """Tasks that succeed when the first step serves ``actions`` [R, M] and the least-slack rule with the greedy
    placement serves the rest, over ``horizon`` steps -> successes [R] (module docstring).

    need [R, K] the future's remaining batches (≥ 1, a huge value for absent slots); est [R, K] the rule's estimate;
    warm [R, K] bool; tau, cap [R, K] remaining steps and generation-cap batches; deadline, task [R, K] tie-breaks;
    last, started, setup [R, K] the placement history; node_speed [M].

    ``arrivals`` (None: none): the tasks that join the queue during the rollout, ``{step, need, est, budget, cap}``
    each [R, A] in the order they join (``step`` the rollout step they join at, ``horizon`` or more for none;
    ``budget`` their steps from joining to the deadline), and ``obs_every``. From step 1 on, a free slot admits the
    next task that has joined (its deadline counts from joining, as in the simulator); it is cold until
    ``WARMUP_OBS`` loss observations (one every ``obs_every`` batches), then judged on ``est`` counted down. Its
    success counts like any other.
    """
    R, K = need.shape
    M = actions.shape[1]
    speed = np.asarray(node_speed, dtype=np.int64)
    rows = np.arange(R)
    tau, last, started, setup = tau.copy(), last.copy(), started.copy(), setup.copy()
    if arrivals is not None:  # admissions write into these
        need, est, cap, deadline, task = need.copy(), est.astype(np.float64), cap.copy(), deadline.copy(), task.copy()
    present = tau > 0
    done = np.zeros((R, K), dtype=np.int64)
    succ = np.zeros(R, dtype=np.int64)
    n_obs = np.where(warm, WARMUP_OBS, 0)
    joined = np.zeros((R, K), dtype=bool)  # slots a rollout arrival holds: observed as they are served
    nxt = np.zeros(R, dtype=np.int64)  # the next arrival each row admits
    c = int(switch_cost)
    top = float(speed.max())
    slots = {"need": need, "est": est, "tau": tau, "cap": cap, "deadline": deadline, "task": task}
    history = {"last": last, "started": started, "setup": setup, "done": done}  # updated in place
    for step in range(horizon):
        if step > 0:
            if arrivals is not None:
                _admit(arrivals, step, nxt, present, joined, slots, history)
                n_obs = np.where(joined, np.minimum(done, cap) // int(arrivals["obs_every"]), n_obs)
            read = est if arrivals is None else np.where(joined & (n_obs < WARMUP_OBS), cap, est)  # a cold arrival: cap
            e = np.maximum(read - done, 0.0)
            picks = _rule_actions(present, e / top, cap - done, n_obs, tau, deadline, task, M)
            actions = assign_nodes(picks, speed, c, last, started, setup, e)
            if displace:
                actions = displace_running(actions, picks, speed, c, last, started, setup, e, tau)
        node = np.full((R, K + 1), IDLE, dtype=np.int64)
        node[rows[:, None], actions] = np.arange(M)[None, :]
        node = node[:, :K]
        served = node >= 0
        switch = served & started & (node != last)
        setup[...] = np.where(switch, c, setup)
        in_setup = served & (setup > 0)
        setup -= in_setup
        work = served & ~in_setup
        done += np.where(work, speed[np.maximum(node, 0)], 0)
        started |= served
        last[...] = np.where(served, node, IDLE)
        win = work & (done >= need) & present
        succ += win.sum(axis=1)
        tau -= 1
        present &= ~win & (tau > 0)
        if not present.any() and (arrivals is None or not _pending(arrivals, nxt, horizon).any()):
            break
    return succ


def _pending(arrivals: dict, nxt, horizon: int) -> np.ndarray:
    """Rows [R] with a rollout arrival still to admit within the horizon."""
    a_step = arrivals["step"]
    i = np.minimum(nxt, a_step.shape[1] - 1)
    return (nxt < a_step.shape[1]) & (a_step[np.arange(len(nxt)), i] < horizon)


def _rule_actions(present, e_steps, cap_left, n_obs, tau, deadline, task, M: int) -> np.ndarray:
    """The least-slack rule's picks [R, M] in a rollout step (slot indices in serving order, ``IDLE`` padded):
    ``e_steps`` the estimate counted down with service, in steps on the fastest node."""
    stage = slack_stage(present, cap_left, n_obs, e_steps, tau)
    keys = slack_keys(stage, e_steps, tau, deadline, task)
    order = np.lexsort(tuple(reversed(keys)), axis=-1)[:, :M]
    picks = np.where(np.take_along_axis(stage, order, axis=1) != SKIP, order, IDLE)
    if picks.shape[1] < M:
        picks = np.pad(picks, ((0, 0), (0, M - picks.shape[1])), constant_values=IDLE)
    return picks


def _admit(arrivals: dict, step: int, nxt, present, joined, slots: dict, history: dict) -> None:
    """Fill free slots, lowest first, with the rollout arrivals that have joined by ``step``, in order (in place):
    ``slots`` the task arrays (need, est, tau, cap, deadline, task), ``history`` the placement's and the service's
    (last, started, setup, done)."""
    need, est, tau, cap, deadline, task = (slots[k] for k in ("need", "est", "tau", "cap", "deadline", "task"))
    last, started, setup, done = (history[k] for k in ("last", "started", "setup", "done"))
    a_step = arrivals["step"]
    R, A = a_step.shape
    rows = np.arange(R)
    while True:
        free = ~present
        has = nxt < A
        i = np.minimum(nxt, A - 1)
        ready = has & (a_step[rows, i] <= step) & free.any(axis=1)
        if not ready.any():
            return
        r = np.flatnonzero(ready)
        k = free[r].argmax(axis=1)
        i = nxt[r]
        left = arrivals["budget"][r, i] - (step - a_step[r, i])
        need[r, k] = np.maximum(arrivals["need"][r, i], 1)
        est[r, k] = arrivals["est"][r, i]
        cap[r, k] = arrivals["cap"][r, i]
        tau[r, k] = left
        deadline[r, k] = step + left
        task[r, k] = 10**9 + i  # after every present task in the tie-break, in joining order
        last[r, k], started[r, k], setup[r, k], done[r, k] = IDLE, False, 0, 0
        present[r, k] = left > 0
        joined[r, k] = True
        nxt[r] += 1


class TaskProfiles:
    """What the planner has seen of each episode's tasks, to draw the tasks that join during a rollout: per episode
    the tasks that arrived so far (the highest task index, in arrival order, plus those queued) and, for every task
    once it is warm, its profile — steps from arrival to deadline, generation cap, and its estimate of the whole
    demand (band ends and median plus the batches already served). A joining task is a profile of the same episode
    drawn at random, its demand drawn from that band; tasks join at the episode's arrival rate so far."""

    def __init__(self, n_episodes: int) -> None:
        self._start(n_episodes)

    def _start(self, n_episodes: int) -> None:
        self.profiles: list[list[tuple]] = [[] for _ in range(n_episodes)]
        self.arrived = np.zeros(n_episodes, dtype=np.int64)  # tasks admitted so far (highest task index + 1)
        self._known: list[set] = [set() for _ in range(n_episodes)]

    def record(self, obs: Observation, warm_obs: int) -> None:
        """Note the tasks of ``obs`` turned warm since the last call, and the arrivals so far."""
        if len(self.profiles) != obs.task.shape[0]:
            self._start(obs.task.shape[0])  # used without reset(n_episodes): sized by the first observation
        self.arrived = np.maximum(self.arrived, obs.task.max(axis=1) + 1)
        warm = obs.present & (obs.n_obs >= warm_obs) & np.isfinite(obs.pred_remaining)
        for e, k in zip(*np.nonzero(warm)):
            t = int(obs.task[e, k])
            if t in self._known[e]:
                continue
            self._known[e].add(t)
            done = float(obs.processed[e, k])
            self.profiles[e].append(
                (
                    int(obs.deadline[e, k] - obs.arrival[e, k]),
                    int(obs.cap_remaining[e, k] + done),
                    float(obs.pred_remaining_lo[e, k]) + done,
                    float(obs.pred_remaining[e, k]) + done,
                    float(obs.pred_remaining_hi[e, k]) + done,
                )
            )

    def sample(self, obs: Observation, eps: np.ndarray, S: int, horizon: int, rng, band) -> dict:
        """Joining tasks for each episode of ``eps`` and future: ``{step, need, est, budget, cap}`` each [len(eps),
        S, A]. The queued tasks join at step 0; then one joins at each step with probability (tasks arrived so far)
        / (t + 1). Their demand is counted from their arrival (``need`` = a draw from the profile's band, ``est``
        its median)."""
        A = int(obs.n_queued[eps].max()) + horizon
        out = {
            "step": np.full((len(eps), S, A), 10**9, np.int64),
            "need": np.ones((len(eps), S, A), np.int64),
            "est": np.ones((len(eps), S, A)),
            "budget": np.zeros((len(eps), S, A), np.int64),
            "cap": np.ones((len(eps), S, A), np.int64),
        }
        for n, e in enumerate(eps):
            prof = np.asarray(self.profiles[e], dtype=np.float64).reshape(-1, 5)
            if not len(prof):
                continue  # nothing seen to draw from: no arrivals
            rate = min(float(self.arrived[e] + obs.n_queued[e]) / (float(obs.t) + 1.0), 1.0)
            q = int(obs.n_queued[e])
            joins = np.concatenate(
                [np.zeros((S, q), np.int64), np.where(rng.random((S, horizon)) < rate, np.arange(horizon), 10**9)],
                axis=1,
            )
            joins.sort(axis=1)
            pick = rng.integers(0, len(prof), size=(S, A))
            z = np.clip(rng.standard_normal((S, A)), -3.0, 3.0)
            p = prof[pick]
            out["step"][n, :, : q + horizon] = joins
            out["need"][n] = np.ceil(band_sample(p[..., 2], p[..., 3], p[..., 4], z, band) - 1e-6).astype(np.int64)
            out["est"][n] = p[..., 3]
            out["budget"][n] = p[..., 0].astype(np.int64)
            out["cap"][n] = p[..., 1].astype(np.int64)
        return out


class PlanRule:
    """The least-slack rule whose placement is chosen by a one-step search over node swaps (module docstring)."""

    name = "Plan"

    def __init__(
        self,
        warm_obs: int = WARMUP_OBS,
        name: str | None = None,
        samples: int = 8,
        horizon: int = 60,
        min_gain: float = 0.0,
        seed: int = 0,
        band=(0.1, 0.9),
        displace: bool = False,
        displace_at: str = "median",
        arrivals: bool = False,
    ) -> None:
        at_least("Plan.samples", samples, 1)
        at_least("Plan.horizon", horizon, 1)
        at_least("Plan.min_gain", min_gain, 0)
        self.rule = SlackRule(warm_obs=warm_obs, displace=displace, displace_at=displace_at)
        self.warm_obs, self.samples, self.horizon = int(warm_obs), int(samples), int(horizon)
        self.min_gain, self.seed, self.band, self.displace = (
            float(min_gain),
            int(seed),
            (float(band[0]), float(band[1])),
            bool(displace),
        )
        self.arrivals = bool(arrivals)
        if name:
            self.name = name
        self.reset(0)

    def reset(self, n_episodes: int) -> None:
        self.timing = {"seconds": 0.0, "decisions": 0, "searched": 0}
        self.seen = TaskProfiles(n_episodes)

    def choose(self, obs: Observation) -> tuple[np.ndarray, np.ndarray]:
        return self.rule.choose(obs)

    def act(self, obs: Observation) -> np.ndarray:
        t0 = time.perf_counter()
        picks, pred = self.rule.choose(obs)
        out = self.rule.act(obs)  # the rule's own placement: greedy, or with the displacement move
        if self.arrivals:
            self.seen.record(obs, self.warm_obs)
        if getattr(obs, "hetero", False):
            out = self._search(obs, picks, out)
        self.timing["seconds"] += time.perf_counter() - t0
        self.timing["decisions"] += int((~np.asarray(obs.done)).sum())
        return out

    def _candidates(self, obs: Observation, greedy: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        """(episode [C], actions [C, M]) of every swap worth scoring."""
        E, M = greedy.shape
        speed = np.asarray(obs.node_speed, dtype=np.int64)
        warm = obs.n_obs >= self.warm_obs
        tau, c = obs.remaining_time, int(obs.switch_cost)
        lo, hi = demand(obs.pred_remaining_lo, warm.shape), demand(obs.pred_remaining_hi, warm.shape)
        rows = np.arange(E)
        eps, acts = [], []
        for i in range(M):
            for j in range(M):
                if speed[i] <= speed[j]:
                    continue
                b, a = greedy[:, i], greedy[:, j]
                ok = (a >= 0) & (b >= 0)
                aa, bb = np.maximum(a, 0), np.maximum(b, 0)
                ok &= warm[rows, aa] & warm[rows, bb]
                da_j = np.where(
                    obs.last_node[rows, aa] == j, obs.setup_left[rows, aa], np.where(obs.started[rows, aa], c, 0)
                )
                da_i = np.where(obs.started[rows, aa], c, 0)
                ok &= da_j + -(-hi[rows, aa] // speed[j]) > tau[rows, aa]  # a may miss its deadline where it is
                ok &= da_i + -(-lo[rows, aa] // speed[i]) <= tau[rows, aa]  # ... and may make it on the faster node
                er = np.flatnonzero(ok)
                if len(er):
                    sw = greedy[er].copy()
                    sw[:, i], sw[:, j] = a[er], b[er]
                    eps.append(er)
                    acts.append(sw)
        if not eps:
            return np.zeros(0, np.int64), np.zeros((0, M), np.int64)
        return np.concatenate(eps), np.concatenate(acts)

    def _search(self, obs: Observation, picks: np.ndarray, greedy: np.ndarray) -> np.ndarray:
        cand_ep, cand_act = self._candidates(obs, greedy)
        if len(cand_ep) == 0:
            return greedy
        E, K = obs.task.shape
        S = self.samples
        eps = np.unique(cand_ep)
        self.timing["searched"] += len(eps)
        # candidate list: each searched episode's greedy placement, then its swaps; every one under the same S futures
        ep_of = np.concatenate([eps, cand_ep])
        act_of = np.concatenate([greedy[eps], cand_act])
        rng = np.random.default_rng([self.seed, int(obs.t)])
        z = np.clip(rng.standard_normal((E, S, K)), -3.0, 3.0)  # one draw per episode, future and slot
        warm = obs.n_obs >= self.warm_obs
        med = np.asarray(obs.pred_remaining, dtype=np.float64)
        draw = band_sample(obs.pred_remaining_lo[:, None], med[:, None], obs.pred_remaining_hi[:, None], z, self.band)
        need = np.where(
            warm[:, None], np.ceil(draw - 1e-6), obs.cap_remaining[:, None]
        )  # [E, S, K]; the log round trip's error must not add a batch
        need = np.where(obs.present[:, None], np.maximum(need, 1), 10**9).astype(np.int64)
        r_ep = np.repeat(ep_of, S)  # [R] rows: candidate-major, future-minor
        r_s = np.tile(np.arange(S), len(ep_of))
        tau = np.where(obs.present, obs.remaining_time, 0)
        horizon = int(min(self.horizon, max(int(tau[eps].max()), 1)))
        arr = None
        if self.arrivals:  # the same joining tasks for every candidate of an episode and future
            joins = self.seen.sample(obs, eps, S, horizon, rng, self.band)
            pos = np.searchsorted(eps, r_ep)
            arr = {k: v[pos, r_s] for k, v in joins.items()}
            arr["obs_every"] = obs.obs_every
        succ = rollout_successes(
            np.repeat(act_of, S, axis=0),
            need[r_ep, r_s],
            np.nan_to_num(med, nan=1e9)[r_ep],
            warm[r_ep],
            tau[r_ep],
            obs.cap_remaining[r_ep],
            obs.deadline[r_ep],
            obs.task[r_ep],
            obs.last_node[r_ep],
            obs.started[r_ep],
            obs.setup_left[r_ep],
            obs.node_speed,
            obs.switch_cost,
            horizon,
            self.displace,
            arr,
        )
        score = succ.reshape(len(ep_of), S).mean(axis=1)
        best = greedy.copy()
        best_score = np.full(E, -np.inf)
        best_score[eps] = score[: len(eps)] + self.min_gain  # a swap must beat the greedy placement by more than this
        for idx in range(len(eps), len(ep_of)):  # few candidates per step: a plain loop keeps the tie rule obvious
            e = ep_of[idx]
            if score[idx] > best_score[e] + 1e-9:
                best_score[e] = score[idx]
                best[e] = act_of[idx]
        return best
