"""The batched simulator's estimates: a slot's remaining batches re-estimated by the predictor when it gets a new loss
observation (from ``first_obs`` on), one env at a time (``EstimateRefresh``, a part of ``BatchedEnv``) or for several
envs sharing one predictor in one batched call (``step_envs``). Shapes: ``[E, K]`` episodes × slots; a request's
arrays ``[R]`` over the slots it asks about (``[R, H]`` over their observations).
"""

from __future__ import annotations

import numpy as np

from mara.predictors.estimates import predict_band


def loss_history(bank_L: np.ndarray, rows, n, cap, batch_size, every: int) -> tuple[np.ndarray, np.ndarray]:
    """The loss observations a predictor is shown: for each of ``rows`` [R] (bank rows) its first ``n`` [R] points,
    one every ``every`` batches up to its ``cap`` [R] -> (S processed samples, L loss) [R, H], 0 after the n-th."""
    j = np.arange(1, int(n.max()) + 1)
    pts = np.minimum(j[None, :] * every, cap[:, None]) - 1  # batch index of each point
    mask = j[None, :] <= n[:, None]
    L = np.where(mask, bank_L[rows[:, None], pts], 0.0)
    S = np.where(mask, (pts + 1) * batch_size[:, None].astype(np.float64), 0.0)
    return S, L


class EstimateRefresh:
    """The predictor refresh of ``BatchedEnv`` (its slot arrays, bank, episodes, predictor and FM cache)."""

    def _refresh_request(self, new_obs: np.ndarray) -> dict | None:
        """The predictor query for slots that just got an observation (from ``first_obs`` on), or None if there are
        none."""
        er, ks = np.nonzero(new_obs)
        if len(er) == 0:
            return None
        s = self.slot_s[er, ks]
        if getattr(self.predictor, "privileged", False):  # the perfect-prediction bound reads the true crossing
            est = self.predictor.remaining_from_need(
                self.slot_need[er, ks], s, np.maximum(self.slot_cap[er, ks] - s, 0)
            )
            self.slot_pred[er, ks] = self.slot_pred_lo[er, ks] = self.slot_pred_hi[er, ks] = est
            self.slot_pred_s[er, ks] = s
            return
        n = s // self.obs_every
        rows = self.slot_row[er, ks]
        bs = self.ep.batch_size[er, self.slot_task[er, ks]]
        S, L = loss_history(self.bank.L, rows, n, self.slot_cap[er, ks], bs, self.obs_every)
        tk = self.slot_task[er, ks]
        cap_rem = np.maximum(self.slot_cap[er, ks] - s, 0)
        keys = None
        if self.fm_cache is not None:  # the observed history: bank row, n points, horizon, spacing
            keys = list(zip(rows.tolist(), n.tolist(), cap_rem.tolist(), [self.obs_every] * len(rows)))
        return {
            "er": er,
            "ks": ks,
            "tk": tk,
            "s": s,
            "S": S,
            "L": L,
            "n": n,
            "eps": self.slot_eps[er, ks],
            "cap": cap_rem,
            "bs": bs,
            "lr": self.ep.lr[er, tk],
            "family": self.ep.family[er, tk],
            "keys": keys,
        }

    def _refresh_apply(self, req: dict, lo, est, hi, current_only: bool = False) -> None:
        """Write a request's estimates; ``current_only``: only to slots still holding the task they were made for."""
        er, ks, s = req["er"], req["ks"], req["s"]
        if current_only:
            keep = self.slot_task[er, ks] == req["tk"]
            er, ks, s, lo, est, hi = er[keep], ks[keep], s[keep], lo[keep], est[keep], hi[keep]
        self.slot_pred[er, ks] = est
        self.slot_pred_lo[er, ks] = lo
        self.slot_pred_hi[er, ks] = hi
        self.slot_pred_s[er, ks] = s

    def _refresh_predictions(self, new_obs: np.ndarray) -> None:
        """Re-estimate remaining batches for slots that just got an observation (from ``first_obs`` on)."""
        req = self._refresh_request(new_obs)
        if req is None:
            return
        lo, est, hi = predict_band(
            self.predictor,
            req["S"],
            req["L"],
            req["n"],
            req["eps"],
            req["cap"],
            req["bs"],
            req["lr"],
            family=req["family"],
            keys=req["keys"],
            cache=self.fm_cache,
        )
        self._refresh_apply(req, lo, est, hi)


def step_envs(envs: list, actions: list[np.ndarray]) -> list[tuple]:
    """Step several envs that share one predictor (and FM cache), answering all their predictor refreshes in one
    batched call; -> one ``env.step`` result per env. Estimates are those of ``env.step`` up to the float32 noise
    of a different batch composition; an estimate is written only if its task is still in its slot at the end of
    the step (a task that left this step is not observed again)."""
    outs = [env._advance(a, defer_refresh=True) for env, a in zip(envs, actions)]
    reqs = [(env, env.deferred_refresh) for env in envs if env.deferred_refresh is not None]
    if reqs:
        first = reqs[0][0]
        H = max(r["S"].shape[1] for _, r in reqs)
        pad = lambda a: np.pad(a, ((0, 0), (0, H - a.shape[1])))  # noqa: E731
        cat = lambda k: np.concatenate([r[k] for _, r in reqs])  # noqa: E731
        keys = None if first.fm_cache is None else [k for _, r in reqs for k in r["keys"]]
        lo, est, hi = predict_band(
            first.predictor,
            np.concatenate([pad(r["S"]) for _, r in reqs]),
            np.concatenate([pad(r["L"]) for _, r in reqs]),
            cat("n"),
            cat("eps"),
            cat("cap"),
            cat("bs"),
            cat("lr"),
            family=cat("family"),
            keys=keys,
            cache=first.fm_cache,
        )
        at = 0
        for env, r in reqs:
            b = len(r["er"])
            env._refresh_apply(r, lo[at : at + b], est[at : at + b], hi[at : at + b], current_only=True)
            env.deferred_refresh = None
            at += b
    return [(env.observe(), *out) for env, out in zip(envs, outs)]
