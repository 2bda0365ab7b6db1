"""Decision-head checkpoints side by side on validation curves only (mara.predictors.qr_ctx.validate's ``validate``):
fm_val (the trained families: the ID task set's validation) and the cal curves' halves (RL, ViT: the OOD task sets'
validation) — MAE, q10–q90 coverage and band width of each, all queries and per observation-count bin.

    python scripts/experiments/head_ckpt_validate.py NAME=CKPT [NAME=CKPT ...]

each CKPT read as predictor ``qr`` (conf/predictor/qr.yaml) with ``ckpt_path`` set; ``NAME=shipped`` reads the
shipped head. Then, per curve set, each head's band width at the first head's q10–q90 coverage (``matched_width``:
the band scaled about its median in log(1 + batches) until it covers as often), so sharpness is compared at equal
coverage.
"""

from __future__ import annotations

import sys

import numpy as np
from omegaconf import OmegaConf

from mara.curves.bank import default_bank_path, load_bank
from mara.predictors.factory import predictor_config, predictor_from
from mara.predictors.prefix import build_queries, cal_bank_path, query_inputs
from mara.predictors.qr_ctx.validate import print_table, validate


def coverage_scaled(q: np.ndarray, truth: np.ndarray, k: float) -> tuple[float, float]:
    """(coverage %, mean width) of the band q [E, 3] scaled by ``k`` about its median in log(1 + batches)."""
    lq, m = np.log1p(np.maximum(q, 0.0)), np.log1p(np.maximum(q[:, 1], 0.0))
    lo, hi = np.expm1(m + k * (lq[:, 0] - m)), np.expm1(m + k * (lq[:, 2] - m))
    tol = 1e-9 * (1.0 + truth)  # the log/exp round trip must not uncover a truth on the band's edge (the cap + 1)
    return float(100 * ((lo <= truth + tol) & (truth <= hi + tol)).mean()), float((hi - lo).mean())


def matched_width(q: np.ndarray, truth: np.ndarray, coverage: float) -> tuple[float, float]:
    """(scale k, mean width) of the band q [E, 3] scaled about its median to cover ``coverage`` % (bisection on k)."""
    a, b = 0.0, 8.0
    for _ in range(60):
        k = 0.5 * (a + b)
        a, b = (k, b) if coverage_scaled(q, truth, k)[0] < coverage else (a, k)
    return b, coverage_scaled(q, truth, b)[1]


def print_matched(preds: dict, bank_path: str, seed: int = 0) -> None:
    """Per curve set (fm_val; each cal family, all its curves, no context needed), each head's width at the first
    head's coverage."""
    bank = load_bank(bank_path)
    sets = [("fm_val", bank, list(np.unique(bank.family[bank.split == "fm_val"])), "fm_val")]
    extra = cal_bank_path(bank.path, "beside")
    if extra is not None:
        cal = load_bank(extra)
        sets += [(f"cal {f}", cal, [f], "cal") for f in np.unique(cal.family)]
    print(
        "\n| curves | head | coverage % | width | scale | width at the first head's coverage |"
        "\n|---|---|---:|---:|---:|---:|"
    )
    for label, b, fams, split in sets:
        q = build_queries(b, fams, split, bank.family_params, seed=seed)
        args = query_inputs(b, q)
        ref = None
        for name, p in preds.items():
            band = p.predict_quantiles(*args)
            cov, width = coverage_scaled(band, q["truth"], 1.0)
            ref = cov if ref is None else ref
            k, w = matched_width(band, q["truth"], ref)
            print(f"| {label} | {name} | {cov:.1f} | {width:.1f} | {k:.2f} | {w:.1f} |")


def main(argv: list[str]) -> None:
    bad = [a for a in argv if "=" not in a]
    if not argv or bad:
        print(
            "usage: head_ckpt_validate.py NAME=CKPT [NAME=CKPT ...] (CKPT 'shipped': the shipped head)", file=sys.stderr
        )
        raise SystemExit(2)
    bank = str(default_bank_path())
    preds = {}
    for name, ckpt in (a.split("=", 1) for a in argv):
        cfg = predictor_config("qr")
        if ckpt != "shipped":
            cfg = OmegaConf.merge(cfg, {"ckpt_path": ckpt})
        preds[name] = predictor_from(cfg, bank)
    print_table(validate(preds, bank))
    print_matched(preds, bank)


if __name__ == "__main__":
    main(sys.argv[1:])
