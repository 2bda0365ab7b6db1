"""Validation of decision heads on curves no evaluation reads: MAE, q10–q90 coverage and width of the band.

- ``fm_val``: the bank's fm_val curves (the trained families), queries as the prediction benchmark builds them;
- ``cal``: the cal curves beside the bank (the families no head trained on), two halves by curve: each half is
  queried with the other half as its family's reference curves (a task never sees its own curve).

(qr_cal's level shifts were fitted on all cal curves: its cal rows are in-sample.) The workload's pool curves (the
evaluation's) are never read. Every choice of the in-context head (k, members,
whether the rule adopts it) is made on these numbers.
CLI: ``python -m mara.predictors.qr_ctx.validate [qr_ctx.ckpt=PATH] [predictors=qr,qr_cal,qr_ctx]``; the choices
evidence: ``choice=k`` (the context alone, no network, per k) and ``choice=blend`` (the plain head's share).
"""

from __future__ import annotations

import sys
import time

import numpy as np

from mara.curves.bank import default_bank_path, load_bank
from mara.predictors.factory import predictor_from
from mara.predictors.prefix import build_queries, cal_bank_path, observe, query_inputs
from mara.predictors.qr.data import decision_examples
from mara.predictors.qr_ctx.family import FamilyContext
from mara.predictors.qr_ctx.head import ContextHeadPredictor, load_context_heads

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


def context_only(bank_path, ks=(4, 8, 16, 32), n: int = 4096, seed: int = 1) -> None:
    """MAE of the context's relative / absolute median alone (no network) per k, on ``n`` fm_val decision examples
    (context: fm_train) and on the cal curves (each left out of its own context), beside WLS's."""
    bank = load_bank(bank_path)
    sets = [("fm_val", bank, np.flatnonzero(bank.split == "fm_val"), [(bank, "fm_train")], False)]
    extra = cal_bank_path(bank.path, "beside")
    if extra is not None:
        cal = load_bank(extra)
        sets.append(("cal (left out)", cal, np.arange(len(cal)), [(cal, "cal")], True))
    for name, b, rows, ref, leave_out in sets:
        ex = decision_examples(b, rows, n, np.random.default_rng(seed), bank.family_params, 10)
        S, L = observe(b, ex.rows, ex.n_obs, 10)
        truth, cap = np.expm1(ex.y), ex.cap_left + 1
        wls = np.abs(np.minimum(np.expm1(ex.static[:, 8]), cap) - truth).mean()
        print(f"{name}: WLS MAE {wls:.1f}")
        for k in ks:
            f = FamilyContext.from_banks(ref, k=k).features(
                S,
                L,
                ex.n_obs,
                ex.eps,
                ex.cap_left,
                b.batch_size[ex.rows],
                b.family[ex.rows],
                ex.rows if leave_out else None,
            )
            rel, ab = (np.abs(np.minimum(np.expm1(f[:, j]), cap) - truth).mean() for j in (3, 1))
            print(f"  k = {k}: relative median MAE {rel:.1f}, absolute median MAE {ab:.1f}")


def blend_choice(bank_path, weights=(0.0, 0.25, 0.5, 0.75)) -> None:
    """fm_val benchmark queries: MAE / q10–q90 coverage / width of qr_ctx at each blend weight (1 = the plain head)."""
    bank = load_bank(bank_path)
    q = build_queries(bank, list(np.unique(bank.family[bank.split == "fm_val"])), "fm_val", bank.family_params)
    args, fam = query_inputs(bank, q), bank.family[q["rows"]]
    for w in weights:
        p = predictor_from({"name": "qr_ctx", "blend": {"weight": w}}, bank.path)
        s = band_scores(p.predict_quantiles(*args, family=fam), q["truth"])
        print(f"blend {w}: MAE {s['mae']:.2f}, coverage {s['coverage']:.1f} %, width {s['width']:.1f}")
    s = band_scores(predictor_from("qr", bank.path).predict_quantiles(*args), q["truth"])
    print(f"blend 1 (the plain head): MAE {s['mae']:.2f}, coverage {s['coverage']:.1f} %, width {s['width']:.1f}")


def _cli(argv) -> None:
    bad = [a for a in argv if "=" not in a or a.split("=", 1)[0] not in ("choice", "bank", "predictors", "qr_ctx.ckpt")]
    if bad:
        print(f"error: unknown argument {bad[0]!r} (choice=k|blend, bank=, predictors=, qr_ctx.ckpt=)", file=sys.stderr)
        raise SystemExit(2)
    kw = dict(a.split("=", 1) for a in argv)
    if kw.get("choice") == "k":
        return context_only(kw.get("bank", str(default_bank_path())))
    if kw.get("choice") == "blend":
        return blend_choice(kw.get("bank", str(default_bank_path())))
    names = kw.get("predictors", "qr,qr_cal,qr_ctx").split(",")
    bank_path = kw.get("bank", str(default_bank_path()))
    preds = {n: predictor_from(n, bank_path) for n in names}
    print_table(validate(preds, bank_path, kw.get("qr_ctx.ckpt")))


if __name__ == "__main__":
    _cli(sys.argv[1:])
