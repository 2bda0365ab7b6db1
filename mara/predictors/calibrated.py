"""FM with a band calibrated per family (``predictor: fm_cal``): split-conformal offsets fitted on held-out curves.

The flow net and its median are the FM's; only the q10–q90 band changes. Each family the FM was trained on gets its
own split-conformal offset (``conformal_offset``, log(1 + batches)) fitted on that family's calibration curves —
the bank's ``calibration.split`` (``pool``: neither the FM's training curves nor the prediction benchmark's ID
queries, which come from ``fm_val``). A family without calibration curves (a novel one: RL, ViT) gets the widest
of the known families' offsets: in a leave-one-family-out check on the calibration curves
(``held_out_family_coverage``, ``python -m mara.predictors.calibrated``) that rule kept every held-out family's
coverage at or above 77 %, while one pooled offset let a family fall to 53 % (docs/predictor.md).
Shapes: ``[B]`` per task, ``[B, Q]`` quantiles.
"""
from __future__ import annotations

from typing import Mapping

import numpy as np

from mara.predictors.fm import FlowPredictor
from mara.predictors.uncertainty import apply_offset, conformal_offset


def family_offsets(lo, hi, truth, family, coverage: float = 0.8) -> dict[str, float]:
    """{family: split-conformal offset} of the band [lo, hi] [B] against ``truth`` [B], one per family in ``family``."""
    family = np.asarray(family)
    return {str(f): conformal_offset(np.asarray(lo)[family == f], np.asarray(hi)[family == f],
                                     np.asarray(truth)[family == f], coverage) for f in np.unique(family)}


def novel_offset(offsets: Mapping[str, float]) -> float:
    """The offset for a family without calibration curves: the widest known family's (0 when none is known)."""
    return float(max(offsets.values())) if offsets else 0.0


def offsets_for(family, offsets: Mapping[str, float], novel: float) -> np.ndarray:
    """Per-row offsets [B]: each row's family's, ``novel`` for a family not in ``offsets`` (or no family given)."""
    if family is None:
        return None
    return np.array([offsets.get(str(f), novel) for f in np.asarray(family)], np.float64)


class CalibratedFlowPredictor:
    """RemainingPredictor: the FM's median, its flow-sample band widened by a per-family conformal offset."""

    name = "fm_cal"
    supports_cache = True

    def __init__(self, fm: FlowPredictor, offsets: Mapping[str, float], novel: float | None = None):
        self.fm, self.offsets = fm, {str(k): float(v) for k, v in offsets.items()}
        self.novel = novel_offset(self.offsets) if novel is None else float(novel)
        self.quantiles = fm.quantiles

    @classmethod
    def from_config(cls, cfg, bank_path=None) -> "CalibratedFlowPredictor":
        """The FM of ``cfg`` (band offset 0) calibrated on the bank at ``bank_path`` (``cfg.calibration``)."""
        from mara.curves.bank import default_bank_path, load_bank

        fm = FlowPredictor.from_config(cfg, bank_path)
        fm.band_offset = 0.0  # the per-family offsets replace the checkpoint's pooled one
        cal = cfg.get("calibration", {}) or {}
        bank = load_bank(bank_path or default_bank_path())
        offsets = calibrate(fm, bank, split=str(cal.get("split", "pool")), coverage=float(cal.get("coverage", 0.8)),
                            obs_every=int(cal.get("obs_every", 10)), seed=int(cal.get("seed", 0)))
        return cls(fm, offsets)

    def predict_quantiles(self, S, L, lengths, eps, cap_remaining, batch_size, lr, family=None, keys=None, cache=None):
        """[B, Q] ordered remaining batches; the outer columns widened by each row's family offset."""
        q = self.fm.predict_quantiles(S, L, lengths, eps, cap_remaining, batch_size, lr, family=family, keys=keys,
                                      cache=cache)
        cap = np.asarray(cap_remaining, np.float64)
        off = offsets_for(family, self.offsets, self.novel)
        off = np.full(len(cap), self.novel) if off is None else off
        mid = int(np.argmin(np.abs(np.asarray(self.quantiles) - 0.5)))
        lo, hi = apply_offset(q[:, 0], q[:, mid], q[:, -1], off, cap)
        q = q.copy()
        q[:, 0], q[:, -1] = lo, hi
        warm = np.asarray(lengths) >= self.fm.min_obs
        q[~warm] = cap[~warm, None]
        return q

    def predict_remaining(self, S, L, lengths, eps, cap_remaining, batch_size, lr, family=None, keys=None, cache=None):
        """The FM's median remaining batches [B] (the calibration moves only the band)."""
        return self.fm.predict_remaining(S, L, lengths, eps, cap_remaining, batch_size, lr, family=family, keys=keys,
                                         cache=cache)

    def sample_futures(self, S, L, lengths, cap_remaining, batch_size, lr, n_samples: int, n_steps: int):
        """The FM's sampled futures (s_edges [B, K+1], L̂ [B, N, K+1]); the calibration does not touch them."""
        return self.fm.sample_futures(S, L, lengths, cap_remaining, batch_size, lr, n_samples, n_steps)


def calibrate(fm: FlowPredictor, bank, split: str = "pool", coverage: float = 0.8, obs_every: int = 10,
              seed: int = 0) -> dict[str, float]:
    """Per-family offsets of ``fm``'s raw band on the ``split`` curves of the families the FM was trained on
    (those with ``fm_train`` curves), queried as the prediction benchmark queries (``seed``: ε / budget draws)."""
    from mara.eval.prediction import build_queries
    from mara.predictors.data import observe

    fams = [f for f in np.unique(bank.family) if len(bank.rows(f, "fm_train")) and len(bank.rows(f, split))]
    if not fams or not bank.family_params:
        return {}
    q = build_queries(bank, fams, split, bank.family_params, obs_every=obs_every, seed=seed)
    rows = q["rows"]
    S, L = observe(bank, rows, q["n_obs"], obs_every)
    raw = fm.predict_quantiles(S, L, q["n_obs"], q["eps"], q["cap"], bank.batch_size[rows], bank.lr[rows],
                               family=bank.family[rows])
    return family_offsets(raw[:, 0], raw[:, -1], q["truth"], bank.family[rows], coverage)


NOVEL_RULES = {"widest": np.max, "upper_quartile": lambda v: float(np.quantile(v, 0.75)), "median": np.median}


def held_out_family_coverage(fm: FlowPredictor, bank, split: str = "pool", coverage: float = 0.8, obs_every: int = 10,
                             seed: int = 0) -> dict:
    """The check behind the novel-family rule, on calibration curves only: each training family in turn plays the
    novel family — its band gets the offset a rule derives from the other families' offsets (``pooled``: one offset
    fitted on their pooled scores) — and its q10–q90 coverage is measured. {rule: {family: coverage}}."""
    from mara.eval.prediction import build_queries
    from mara.predictors.data import observe
    from mara.predictors.uncertainty import band_metrics

    fams = [f for f in np.unique(bank.family) if len(bank.rows(f, "fm_train")) and len(bank.rows(f, split))]
    q = build_queries(bank, fams, split, bank.family_params, obs_every=obs_every, seed=seed)
    rows = q["rows"]
    S, L = observe(bank, rows, q["n_obs"], obs_every)
    raw = fm.predict_quantiles(S, L, q["n_obs"], q["eps"], q["cap"], bank.batch_size[rows], bank.lr[rows],
                               family=bank.family[rows])
    fam = bank.family[rows]
    offs = family_offsets(raw[:, 0], raw[:, -1], q["truth"], fam, coverage)
    out = {rule: {} for rule in ("pooled", *NOVEL_RULES)}
    for f in fams:
        m, rest = fam == f, fam != f
        cands = {"pooled": conformal_offset(raw[rest, 0], raw[rest, -1], q["truth"][rest], coverage),
                 **{r: float(agg([v for g, v in offs.items() if g != f])) for r, agg in NOVEL_RULES.items()}}
        for rule, e in cands.items():
            lo, hi = apply_offset(raw[m, 0], raw[m, 1], raw[m, -1], e, q["cap"][m])
            band = np.stack([lo, raw[m, 1], hi], axis=1)
            out[rule][str(f)] = band_metrics(band, q["truth"][m])["coverage"]
    return out


if __name__ == "__main__":  # python -m mara.predictors.calibrated: the held-out-family check on the shipped FM
    from mara.curves.bank import default_bank_path
    from mara.predictors.factory import predictor_from

    p = predictor_from("fm_cal", default_bank_path())
    print("offsets:", {k: round(v, 3) for k, v in p.offsets.items()}, "novel:", round(p.novel, 3))
    from mara.curves.bank import load_bank

    for rule, cov in held_out_family_coverage(p.fm, load_bank(default_bank_path())).items():
        v = np.array(list(cov.values()))
        print(f"{rule:15s} held-out coverage min {100 * v.min():.1f} mean {100 * v.mean():.1f} % |",
              " ".join(f"{k} {100 * c:.0f}" for k, c in cov.items()))
