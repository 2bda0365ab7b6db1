"""Where estimates come from: a job's loss prefix -> quantiles of the batches it still needs, from any predictor.

Every reader asks here, so a predictor registered in conf/predictor serves them all without code of its own:

- ``predict_band``: one batched call, prefixes as padded arrays -> (lo, median, hi) remaining batches (a predictor
  without quantiles answers its point estimate three times). The paper simulator's refresh (mara/sim/env.py), the
  trace world's paper setting and the bench call it; a predictor that ``supports_cache`` reuses its
  policy-independent work through ``cache`` (``FlowSampleCache``, keyed by ``keys``).
- ``Estimates``: one predictor (an instance, or ``Estimates.named``: any registered name, built by the factory)
  with a memo per (job key, batches observed), so a prefix asked for again is answered without the predictor.
  ``bank_prefix_band`` reads jobs whose losses are rows of a curve bank (the trace world's target-loss jobs:
  ``PredictedCount`` in mara/traces/target_run.py, which the trace rules and MARA's trace policy read, and the
  prediction benchmark mara/traces/target_prediction.py).

Which kinds can be read on trace jobs is the registry's (``traces: true`` in a kind's ``registry`` block:
``mara.core.registry.trace_predictors``), never a list here.

Shapes: ``B`` (or ``n``) tasks, ``H`` padded history; band columns (lo, median, hi).
"""

from __future__ import annotations

import numpy as np

from mara.predictors.factory import predictor_from
from mara.predictors.protocol import WARMUP_OBS


def predict_band(predictor, S, L, lengths, eps, cap_remaining, batch_size, lr, family=None, keys=None, cache=None):
    """(lo [B], median [B], hi [B]) remaining batches: the predictor's outer quantiles and its median.

    ``keys`` (one hashable per row naming its observed history) and ``cache`` (``FlowSampleCache``) let a predictor
    that ``supports_cache`` reuse its policy-independent work; other predictors ignore them."""
    extra = {"keys": keys, "cache": cache} if cache is not None and getattr(predictor, "supports_cache", False) else {}
    if hasattr(predictor, "predict_quantiles"):
        q = predictor.predict_quantiles(S, L, lengths, eps, cap_remaining, batch_size, lr, family=family, **extra)
        return q[:, 0], q[:, q.shape[1] // 2], q[:, -1]
    med = predictor.predict_remaining(S, L, lengths, eps, cap_remaining, batch_size, lr, family=family, **extra)
    return med, med, med


class Estimates:
    """A predictor's answers for jobs' loss prefixes, each (job key, batches observed) asked once."""

    def __init__(self, predictor):
        self.predictor = predictor
        #: batches of loss a job needs before the predictor is asked (before: the caller's prior)
        self.min_obs = int(getattr(predictor, "min_obs", WARMUP_OBS))
        self.memo: dict = {}  # (job key, batches observed) -> band row (lo, median, hi)

    @classmethod
    def named(cls, spec, bank_path=None) -> "Estimates":
        """The estimates of the registered predictor ``spec`` (a name or a config: ``predictor_from``)."""
        return cls(predictor_from(spec, bank_path))

    def bank_prefix_band(self, bank, rows, seen, eps, family) -> np.ndarray:
        """The band [n, 3] of remaining bank batches to ``eps`` of jobs whose losses are bank ``rows``, from their first
        ``seen`` batches (seen >= 1): the prefixes as the predictor reads them (NaN past each one's end), the cap the
        curve's batches left."""
        rows, n = np.asarray(rows), np.asarray(seen, dtype=np.int64)
        H = int(n.max())
        S, L = bank.S[rows, :H].copy(), bank.L[rows, :H].copy()
        pad = np.arange(H)[None, :] >= n[:, None]
        S[pad], L[pad] = np.nan, np.nan
        cap = (bank.lengths[rows] - n).astype(np.float64)
        return self.predictor.predict_quantiles(S, L, n, eps, cap, bank.batch_size[rows], bank.lr[rows], family=family)

    def remembered(self, keys, bank, rows, seen, eps, family) -> tuple[np.ndarray, bool]:
        """(band [n, 3] of ``bank_prefix_band``, whether the predictor was asked): the jobs named ``keys`` answered
        from the memo where their (key, seen) was asked before, the others in one call."""
        ks = [(int(k), int(s)) for k, s in zip(keys, seen)]
        need = [i for i, k in enumerate(ks) if k not in self.memo]
        if need:
            q = self.bank_prefix_band(bank, rows[need], np.asarray(seen)[need], eps[need], family[need])
            for i, row in zip(need, q):
                self.memo[ks[i]] = row
        return np.array([self.memo[k] for k in ks]).reshape(len(ks), -1), bool(need)
