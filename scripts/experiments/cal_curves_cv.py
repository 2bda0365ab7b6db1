"""How the calibration from ``cal`` curves holds on curves it was not fitted on: 5-fold cross-validation over the cal
curves of the families the predictors never trained on (folds by curve), on those curves alone — never the pool
curves the simulator and the prediction benchmark draw from.

- FM band (``fm_cal``): q10–q90 coverage and mean width of a joint split-conformal offset, with and without the
  observation-count bins, against separate offsets for the two ends (each end missing 10 %).
- Decision head (``qr_cal`` / ``qr_q_cal``): the share of truths at or below each band level, raw and shifted
  (``level_shift.py``, per observation-count bin), and the head's q10–q90 coverage.

    python scripts/experiments/cal_curves_cv.py [--cal-bank mara/data/banks/zoo_cal.parquet]
"""

from __future__ import annotations

import argparse

import numpy as np

from mara.curves.bank import default_bank_path, load_bank
from mara.predictors.bands.conformal import conformal_offset, conformal_score
from mara.predictors.bands.level_shift import apply_level_shifts, level_shifts
from mara.predictors.factory import predictor_config, predictor_from
from mara.predictors.prefix import cal_bank_path, query_inputs, untrained_cal_queries

BINS = (10, 20)


def _log1p(a):
    return np.log1p(np.maximum(np.asarray(a, np.float64), 0.0))


def fm_band(raw, y, n_obs, fit, test, bins, mode):
    """The band of the ``test`` queries with offsets fitted on the ``fit`` queries (per bin)."""
    lo, hi = _log1p(raw[test, 0]), _log1p(raw[test, -1])
    b_fit, b_test = np.digitize(n_obs[fit], bins), np.digitize(n_obs[test], bins)
    for b in range(len(bins) + 1):
        f, t = b_fit == b, b_test == b
        if not t.any() or not f.any():
            continue
        l, h, yy = raw[fit][f, 0], raw[fit][f, -1], y[fit][f]
        if mode == "joint":
            e_lo = e_hi = conformal_offset(l, h, yy, 0.8)
        else:
            e_lo, e_hi = conformal_score(_log1p(l) - _log1p(yy), 0.9), conformal_score(_log1p(yy) - _log1p(h), 0.9)
        lo[t] -= e_lo
        hi[t] += e_hi
    med = _log1p(raw[test, 1])
    return np.expm1(np.minimum(lo, med)), np.expm1(np.maximum(hi, med))


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--cal-bank", default="beside")
    ap.add_argument("--folds", type=int, default=5)
    args = ap.parse_args()
    bank = load_bank(default_bank_path())
    path = cal_bank_path(default_bank_path(), args.cal_bank)
    if path is None:
        raise SystemExit("no cal bank beside the shipped bank (docs/banks.md: calibration curves)")
    cal = load_bank(path)
    q = untrained_cal_queries(bank, cal)
    rows, n_obs, y = q["rows"], q["n_obs"], q["truth"]
    fam = cal.family[rows].astype(str)
    call = query_inputs(cal, q)
    fm_cfg = predictor_config("fm_cal")
    fm_cfg.calibration.cal_bank = None
    raw = predictor_from(fm_cfg, default_bank_path()).fm.predict_quantiles(*call, family=fam)
    heads = {}
    for name in ("qr", "qr_q"):
        head = predictor_from(name, default_bank_path())
        heads[name] = (head, head.predict_quantiles(*call, family=fam))
    for f in np.unique(fam):
        mine = fam == f
        curves = np.unique(rows[mine])
        folds = np.array_split(np.random.default_rng(0).permutation(curves), args.folds)
        print(f"\n{f}: {len(curves)} cal curves, {mine.sum()} queries, {args.folds}-fold CV by curve")
        for bins in ((), BINS):
            for mode in ("joint", "separate"):
                cover, width = [], []
                for k in range(args.folds):
                    test = mine & np.isin(rows, folds[k])
                    fit = mine & ~test
                    lo, hi = fm_band(raw, y, n_obs, fit, test, bins, mode)
                    lo, hi = np.clip(lo, 0, q["cap"][test]), np.clip(hi, 0, q["cap"][test])
                    cover.append((lo <= y[test] + 1e-6) & (y[test] <= hi + 1e-6))
                    width.append(hi - lo)
                c, w = np.concatenate(cover), np.concatenate(width)
                print(
                    f"  FM band, offsets {mode:8s} bins {bins!s:8s}: coverage {100 * c.mean():5.1f} %, "
                    f"width {w.mean():6.1f} batches"
                )
        for name, (head, band) in heads.items():
            levels = head.quantiles
            moved = np.full_like(band, np.nan)
            for k in range(args.folds):
                test = mine & np.isin(rows, folds[k])
                fit = mine & ~test
                shifts = level_shifts(band[fit], y[fit], levels, fam[fit], n_obs[fit], BINS)
                moved[test] = apply_level_shifts(band[test], fam[test], n_obs[test], shifts, BINS, q["cap"][test])
            for label, b in (("raw", band[mine]), ("shifted", moved[mine])):
                share = ", ".join(
                    f"q{lv:g} {100 * (y[mine] <= b[:, j] + 1e-6).mean():.0f} %" for j, lv in enumerate(levels)
                )
                cov = ((b[:, 0] <= y[mine] + 1e-6) & (y[mine] <= b[:, -1] + 1e-6)).mean()
                print(
                    f"  head {name:5s} {label:8s}: truths at or below {share}; [q{levels[0]:g}, q{levels[-1]:g}] "
                    f"coverage {100 * cov:.1f} %"
                )


if __name__ == "__main__":
    main()
