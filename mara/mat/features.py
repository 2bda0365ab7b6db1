"""Observation → task-slot tokens for the MAT policy (§4.2).

Shapes: ``[E, K, F]`` episodes × task slots × features; ``present [E, K]`` bool. Batch and step counts are
divided by ``scale`` (≈ the largest budget) so typical values lie in [0, 2].

Feature sets (``mat.net.features``, recorded in the checkpoint's hparams; a checkpoint without it is ``v1``):

- ``v1`` (the shipped policies): 7 per-slot features (present, predicted remaining, remaining time, median slack,
  warm-up fraction, processed, median-feasible) + 3 global (nodes, active, queued).
- ``v2`` (what the band-aware rule reads and the v1 tokens lack): v1's 7 + the slacks at the
  band's q10 and q90 and at its ``BAND_Q`` quantile (the quantile Slack-FM-q judges feasibility by,
  ``mara.allocators.slack.band_quantile``), the Slack-FM-q stage as one-hot (finishable / cold / hopeless at that
  quantile; all zero = not servable), the band's width in log1p batches, the observation count, the cap left.
  Every one is computed from the ``Observation`` alone (the estimates the simulator carries), never from the curve.
  Not in the observation and so not in the tokens: the loss relative to ε and its slope, the FM novelty score.
  The quantile and the levels of the band's ends are the policy's ``token_q`` / ``token_band`` (``mat.net``;
  default 0.01 on the FM's (0.1, 0.9) band): ``mat=default`` reads the decision head's 0.05 level itself, as
  Slack-QR-q does.
- ``v3`` (heterogeneous nodes and switch costs, ``node_slot_features``): v2's 17 + per slot whether it ran at
  t−1, the speed of the node it ran on relative to the fastest (0 if none), the set-up steps it still owes there,
  whether it was served before (a move or resume then pays the switch cost), its median remaining estimate in steps
  on the fastest node, the slacks at the ``BAND_Q`` quantile counted in fastest-node and in slowest-node steps, and the
  Slack-FM-q stage judged in fastest-node steps (what that rule reads on such nodes, ``fastest_node_steps``) + the
  node profile (share of nodes at the top speed, mean speed / top speed, top speed / 4, switch cost / 10),
  the same in every slot. On identical nodes with free preemption these are what such nodes give (no history
  features beyond ``started``/``last_node``, slacks equal to v2's), so one policy serves both settings.
"""

from __future__ import annotations

import numpy as np
import torch

from mara.allocators.slack import COLD, FINISHABLE, HOPELESS, band_quantile, slack_stage
from mara.sim.env import Observation

N_GLOBAL_FEATURES = 3
N_SLOT_FEATURES_BY_SET = {"v1": 7, "v2": 17, "v3": 31}
FEATURE_SETS = tuple(N_SLOT_FEATURES_BY_SET)
N_SLOT_FEATURES = N_SLOT_FEATURES_BY_SET["v1"]  # the v1 sizes (old imports)
N_FEATURES = N_SLOT_FEATURES + N_GLOBAL_FEATURES
BAND_Q = 0.01  # conf/experiments/method/Slack-FM-q.yaml's quantile (chosen on validation roots 1000–1004)
BAND_LEVELS = (0.1, 0.9)  # the levels of the band's ends the FM carries (conf/predictor/fm.yaml)


def token_options(policy) -> dict:
    """The token settings a policy was trained with (``mat.net.token_q`` / ``mat.net.token_band``, recorded in the
    checkpoint's hparams; absent: Slack-FM-q's quantile on the FM band) as ``obs_to_tokens`` keywords."""
    return {"q": float(getattr(policy, "token_q", BAND_Q)), "band": tuple(getattr(policy, "token_band", BAND_LEVELS))}


def n_features(feature_set: str = "v1") -> tuple[int, int]:
    """-> (per-slot features, all features) of a feature set; unknown names are a one-line ValueError."""
    if feature_set not in N_SLOT_FEATURES_BY_SET:
        raise ValueError(f"mat.net.features must be one of {', '.join(FEATURE_SETS)}, got {feature_set!r}")
    s = N_SLOT_FEATURES_BY_SET[feature_set]
    return s, s + N_GLOBAL_FEATURES


def band_slot_features(obs: Observation, scale: float, q: float = BAND_Q, band=BAND_LEVELS) -> np.ndarray:
    """The v2 additions [E, K, 10] (zero where absent), from the observation only. ``q``: the quantile the stage and
    the third slack are judged at; ``band``: the levels of the band's ends (``band_quantile``). With the decision
    head's ``qr_q`` band (0.05, 0.9) and q = 0.05 they are Slack-QR-q's (the head's 0.05 level, read directly)."""

    tau = obs.remaining_time.astype(np.float64)
    med = np.asarray(obs.pred_remaining, dtype=np.float64)
    lo = np.asarray(obs.pred_remaining_lo, dtype=np.float64)
    hi = np.asarray(obs.pred_remaining_hi, dtype=np.float64)
    pq = band_quantile(lo, med, hi, q, band)
    stage = slack_stage(obs.present, obs.cap_remaining, obs.n_obs, pq, tau)

    def sl(p):
        return np.clip((tau - p) / scale, -3.0, 3.0)

    return np.stack(
        [
            sl(lo),
            sl(hi),
            sl(pq),
            (stage == FINISHABLE).astype(np.float64),
            (stage == COLD).astype(np.float64),
            (stage == HOPELESS).astype(np.float64),
            np.clip(np.log1p(np.maximum(hi, 0.0)) - np.log1p(np.maximum(lo, 0.0)), 0.0, 5.0),
            np.clip(obs.n_obs / 40.0, 0.0, 3.0),
            np.clip(obs.cap_remaining / scale, 0.0, 3.0),
            (obs.cap_remaining > 0).astype(np.float64),
        ],
        axis=-1,
    )


def node_slot_features(obs: Observation, scale: float, q: float = BAND_Q, band=BAND_LEVELS) -> np.ndarray:
    """The v3 additions [E, K, 14] (module docstring; the caller zeroes absent slots), from the observation only:
    the slot's node history and its estimates in node-speed terms, then the node profile (same in every slot)."""

    E, K = obs.present.shape
    speed = np.asarray(obs.node_speed, dtype=np.float64)
    smax, smin = float(speed.max()), float(speed.min())
    tau = obs.remaining_time.astype(np.float64)
    med = np.asarray(obs.pred_remaining, dtype=np.float64)
    pq = band_quantile(obs.pred_remaining_lo, med, obs.pred_remaining_hi, q, band)
    last = np.asarray(obs.last_node)
    ran = last >= 0
    last_speed = np.where(ran, speed[np.maximum(last, 0)] / smax, 0.0)
    stage = slack_stage(obs.present, obs.cap_remaining, obs.n_obs, pq / smax, tau)
    per_slot = np.stack(
        [
            ran.astype(np.float64),
            last_speed,
            np.clip(np.asarray(obs.setup_left, dtype=np.float64) / 10.0, 0.0, 3.0),
            np.asarray(obs.started, dtype=np.float64),
            np.clip(med / smax / scale, 0.0, 3.0),
            np.clip((tau - pq / smax) / scale, -3.0, 3.0),
            np.clip((tau - pq / smin) / scale, -3.0, 3.0),
            (stage == FINISHABLE).astype(np.float64),
            (stage == COLD).astype(np.float64),
            (stage == HOPELESS).astype(np.float64),
        ],
        axis=-1,
    )
    profile = np.array(
        [np.mean(speed == smax), speed.mean() / smax, min(smax / 4.0, 3.0), min(float(obs.switch_cost) / 10.0, 3.0)]
    )
    return np.concatenate([per_slot, np.broadcast_to(profile, (E, K, 4))], axis=-1)


def obs_to_tokens(
    obs: Observation, scale: float = 350.0, feature_set: str = "v1", q: float = BAND_Q, band=BAND_LEVELS
) -> tuple[torch.Tensor, torch.Tensor]:
    """One token per slot: per-slot state (zero where absent), then the normalised node / active / queued counts.
    ``q`` / ``band``: the quantile and band levels the v2/v3 additions read (``token_options(policy)``).

    -> (tokens [E, K, F] float32, present [E, K] bool); F = ``n_features(feature_set)[1]``.
    """
    n_features(feature_set)  # validates the name
    present = obs.present
    K = obs.max_active
    pred = np.clip(obs.pred_remaining / scale, 0.0, 3.0)
    rem = np.clip(obs.remaining_time / scale, 0.0, 3.0)
    slack = np.clip((obs.remaining_time - obs.pred_remaining) / scale, -3.0, 3.0)
    per_slot = np.stack(
        [
            present.astype(np.float64),
            pred,
            rem,
            slack,
            obs.warmup,
            np.clip(obs.processed / scale, 0.0, 3.0),
            (obs.pred_remaining <= obs.remaining_time).astype(np.float64),  # predicted feasible if served every step
        ],
        axis=-1,
    )
    if feature_set in ("v2", "v3"):
        per_slot = np.concatenate([per_slot, band_slot_features(obs, scale, q, band)], axis=-1)
    if feature_set == "v3":
        per_slot = np.concatenate([per_slot, node_slot_features(obs, scale, q, band)], axis=-1)
    per_slot = per_slot * present[..., None]
    E = present.shape[0]
    glob = np.stack(
        [np.full(E, obs.n_nodes / K), obs.n_active / K, np.minimum(obs.n_queued / K, 3.0)], axis=-1
    )  # [E, 3]
    tokens = np.concatenate([per_slot, np.broadcast_to(glob[:, None, :], (E, K, N_GLOBAL_FEATURES))], axis=-1)
    return torch.as_tensor(tokens, dtype=torch.float32), torch.as_tensor(present)
