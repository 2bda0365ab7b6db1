"""Validation of decision heads on curves no evaluation reads: MAE, q10–q90 coverage and width of the band.

- ``fm_val``: the bank's fm_val curves (the trained families), queries as the prediction benchmark builds them;
- ``cal``: the cal curves beside the bank (the families no head trained on), two halves by curve: each half is
  queried with the other half as its family's reference curves (a task never sees its own curve).

(qr_cal's level shifts were fitted on all cal curves: its cal rows are in-sample.) The workload's pool curves (the
evaluation's) are never read. Every choice of the in-context head (k, members,
whether the rule adopts it) is made on these numbers.
CLI: ``python -m mara.predictors.context_validate [qr_ctx.ckpt=PATH] [predictors=qr,qr_cal,qr_ctx]``
"""

from __future__ import annotations

import sys
import time

import numpy as np

from mara.curves.bank import default_bank_path, load_bank
from mara.predictors.context_head import ContextHeadPredictor, load_context_heads
from mara.predictors.factory import predictor_from
from mara.predictors.family_context import FamilyContext
from mara.predictors.queries import build_queries, cal_bank_path, query_inputs

OBS_BINS = ((4, 6), (6, 10), (10, 20), (20, 40), (40, 10**6))


def band_scores(q: np.ndarray, truth: np.ndarray) -> dict:
    """MAE of the median, q10–q90 coverage (%) and mean width (batches): q [E, 3], truth [E]."""
    return {
        "n": int(len(truth)),
        "mae": float(np.abs(q[:, 1] - truth).mean()),
        "coverage": float(100 * ((q[:, 0] <= truth) & (truth <= q[:, 2])).mean()),
        "width": float((q[:, 2] - q[:, 0]).mean()),
    }


def scores(q, truth, n_obs) -> dict:
    """``band_scores`` over all queries and per observation-count bin."""
    out = {"all": band_scores(q, truth)}
    for lo, hi in OBS_BINS:
        m = (n_obs >= lo) & (n_obs < hi)
        if m.any():
            out[f"{lo}-{hi - 1 if hi < 10**6 else ''}"] = band_scores(q[m], truth[m])
    return out


def validate(predictors: dict, bank_path, ctx_ckpt=None, seed: int = 0) -> dict:
    """{split: {predictor: scores}} (module docstring); ``ctx_ckpt``: an in-context head checkpoint to score too."""
    bank = load_bank(bank_path)
    fp = bank.family_params
    out = {}
    q = build_queries(bank, list(np.unique(bank.family[bank.split == "fm_val"])), "fm_val", fp, seed=seed)
    args = query_inputs(bank, q)
    fam = bank.family[q["rows"]]
    res = {}
    for name, p in predictors.items():
        t = time.time()
        res[name] = scores(p.predict_quantiles(*args, family=fam), q["truth"], q["n_obs"])
        res[name]["ms_per_query"] = 1000 * (time.time() - t) / len(fam)
    if ctx_ckpt is not None:
        p = ContextHeadPredictor(load_context_heads(ctx_ckpt), FamilyContext.from_banks([(bank, "fm_train")]))
        res["qr_ctx (this checkpoint)"] = scores(p.predict_quantiles(*args, family=fam), q["truth"], q["n_obs"])
    out["fm_val"] = res
    extra = cal_bank_path(bank.path, "beside")
    if extra is None:
        return out
    cal = load_bank(extra)
    halves = np.random.default_rng(seed).random(len(cal)) < 0.5
    res = {}
    for fam_name in np.unique(cal.family):
        per = {}
        for h in (True, False):
            qq = build_queries(cal, [fam_name], "cal", fp, seed=seed)
            keep = halves[qq["rows"]] == h
            qq = {k: v[keep] for k, v in qq.items()}
            a = query_inputs(cal, qq)
            fam = cal.family[qq["rows"]]
            ctx = _half_context(cal, halves != h)
            for name, p in predictors.items():
                if isinstance(p, ContextHeadPredictor):
                    p = ContextHeadPredictor(p.nets, ctx, p.quantiles, p.min_obs)
                per.setdefault(name, []).append((p.predict_quantiles(*a, family=fam), qq["truth"], qq["n_obs"]))
            if ctx_ckpt is not None:
                p = ContextHeadPredictor(load_context_heads(ctx_ckpt), ctx)
                per.setdefault("qr_ctx (this checkpoint)", []).append(
                    (p.predict_quantiles(*a, family=fam), qq["truth"], qq["n_obs"])
                )
        for name, parts in per.items():
            res.setdefault(str(fam_name), {})[name] = scores(*(np.concatenate(x) for x in zip(*parts)))
    out["cal (halves)"] = res
    return out


def _half_context(cal, mask) -> FamilyContext:
    """Reference curves: the cal curves in ``mask``, per family."""
    rows = np.flatnonzero(mask)
    curves, lengths = {}, {}
    for f in np.unique(cal.family[rows]):
        r = rows[cal.family[rows] == f]
        curves[str(f)], lengths[str(f)] = cal.L[r], cal.lengths[r]
    return FamilyContext(curves, lengths)


def print_table(res: dict) -> None:
    for split, per in res.items():
        groups = per.items() if split == "cal (halves)" else [("", per)]
        for fam, preds in groups:
            print(f"\n{split} {fam}\n| predictor | MAE | q10–q90 cov. % | width | by n_obs (MAE / cov.) |")
            print("|---|---:|---:|---:|---|")
            for name, s in preds.items():
                a = s["all"]
                bins = " · ".join(
                    f"{k}: {v['mae']:.1f}/{v['coverage']:.0f}" for k, v in s.items() if k not in ("all", "ms_per_query")
                )
                print(f"| {name} | {a['mae']:.2f} | {a['coverage']:.1f} | {a['width']:.1f} | {bins} |")


def _cli(argv) -> None:
    kw = dict(a.split("=", 1) for a in argv)
    names = kw.get("predictors", "qr,qr_cal,qr_ctx").split(",")
    bank_path = kw.get("bank", str(default_bank_path()))
    preds = {n: predictor_from(n, bank_path) for n in names}
    print_table(validate(preds, bank_path, kw.get("qr_ctx.ckpt")))


if __name__ == "__main__":
    _cli(sys.argv[1:])
