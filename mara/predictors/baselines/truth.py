"""The perfect-prediction bound: ``predictor: truth`` reads each task's own curve.

The true remaining batches of a task are ``need − processed`` (``need`` = the first batch at which the task's
curve reaches ε). A curve that never reaches ε within its generation cap gets ``cap_remaining + 1`` — more
batches than the cap allows, so every rule reads it as "cannot finish" while the value stays finite.

It is a **bound**, not a predictor a scheduler could have: only the simulator can feed it (it needs ``need``,
which no loss prefix reveals), it is refused to learned policies at evaluation time (``mara.eval.runner``), and
it cannot run in live mode (the crossing is unknown until it happens). Timing is the other predictors' timing:
the simulator refreshes it only at an observation from the 4th on and it counts down with service in between,
and before the 4th observation a task is cold (``Observation.pred_remaining`` = the cap) — so the difference
between a rule with ``truth`` and the same rule with FM/WLS is due to the estimates alone. A config with
``first_obs: 1`` (``truth_cold``) gives the true remaining batches from the first observation, the bound at the
timing of a predictor that answers cold tasks (``qr_q_cold``).
"""

from __future__ import annotations

import numpy as np


def true_remaining_batches(need, processed, cap_remaining) -> np.ndarray:
    """[B] float: ``need − processed`` (≥ 0), or ``cap_remaining + 1`` where ε is not reached within the cap."""
    need = np.asarray(need, dtype=np.int64)
    processed = np.asarray(processed, dtype=np.int64)
    cap_remaining = np.asarray(cap_remaining, dtype=np.int64)
    left = np.maximum(need - processed, 0)
    return np.where(left <= cap_remaining, left, cap_remaining + 1).astype(np.float64)


class TruthPredictor:
    """``privileged``: the simulator calls ``remaining_from_need`` with the slots' true crossings."""

    name = "truth"
    privileged = True

    def remaining_from_need(self, need, processed, cap_remaining) -> np.ndarray:
        return true_remaining_batches(need, processed, cap_remaining)

    def predict_remaining(self, *args, **kwargs):
        raise TypeError(
            "the truth predictor reads the task's own curve (need − processed): only the simulator can "
            "feed it; it is a bound, not a predictor of a loss prefix"
        )

    @classmethod
    def from_config(cls, cfg=None, bank_path=None) -> "TruthPredictor":
        return cls()
