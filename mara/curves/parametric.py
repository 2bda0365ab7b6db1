"""Interim parametric curve bank: noisy power-law / plateau curves for all ten families of Table 6.

Not real training runs: every row says ``data_source=parametric``. Each curve's expected per-batch
loss is ``floor + (init - floor) * g(i)`` where ``g`` is a power law in batches, optionally with a
plateau that ends in a sigmoid drop; the learning rate sets the decay speed, the batch size the
per-batch noise (multiplicative, AR(1)-correlated). Family styles roughly follow the domains (image
classification starts near ln 10, binary text/audio near ln 2, Montezuma near ln 18).

Run ``python -m mara.curves.parametric --out mara/data/banks/parametric.parquet`` to rebuild the
shipped bank (calibrated so the Oracle rate is ≈ 70 % per family).
"""

from __future__ import annotations

import argparse
import datetime as _dt
import json
import platform

import numpy as np

from mara.curves.bank import load_bank, write_bank
from mara.curves.calibrate import calibrate_family_params
from mara.curves.families import (
    ALL_FAMILIES,
    DOMAIN_BATCH_SIZES,
    FAMILY_DOMAIN,
    ID_FAMILIES,
    LR_RANGE,
    PAPER_FAMILY_PARAMS,
    generation_cap,
)

# (initial loss, floor range, decay exponent range, time-scale range in batches, plateau probability, noise)
STYLES = {
    "CNN_Cifar10": (2.30, (0.9, 1.3), (0.45, 0.8), (20, 60), 0.10, 0.10),
    "ResNet18_Cifar10": (2.40, (0.8, 1.3), (0.35, 0.7), (30, 90), 0.15, 0.12),
    "ResNet34_Cifar10": (2.45, (0.8, 1.4), (0.30, 0.65), (40, 110), 0.20, 0.12),
    "LSTM_Cifar10": (2.30, (1.3, 1.8), (0.30, 0.60), (40, 120), 0.25, 0.08),
    "TSFM_Audio_1": (0.72, (0.05, 0.25), (0.40, 0.90), (30, 100), 0.30, 0.25),
    "TSFM_Audio_2": (0.70, (0.10, 0.35), (0.35, 0.80), (40, 120), 0.30, 0.22),
    "ALSTM_Text_1": (0.70, (0.005, 0.03), (0.60, 1.10), (30, 90), 0.20, 0.30),
    "ALSTM_Text_2": (0.70, (0.004, 0.03), (0.55, 1.00), (40, 110), 0.25, 0.30),
    "RLExpertConfig": (2.90, (0.6, 1.4), (0.25, 0.60), (30, 150), 0.45, 0.15),
    "ViT_Cifar10_1": (2.35, (1.5, 1.9), (0.20, 0.45), (60, 160), 0.20, 0.07),
}
SPLIT_COUNTS = {"fm_train": 50, "fm_val": 10, "pool": 30}


def parametric_curve(family: str, batch_size: int, lr: float, rng: np.random.Generator, n: int) -> np.ndarray:
    """One noisy per-batch loss curve [n] for a family, recipe (batch size, lr) and generator."""
    init, floor_r, exp_r, tau_r, p_plateau, noise = STYLES[family]
    floor = rng.uniform(*floor_r)
    # a larger learning rate (log-scale position in the A.2 range) shortens the time scale
    lr_pos = (np.log(lr) - np.log(LR_RANGE[0])) / (np.log(LR_RANGE[1]) - np.log(LR_RANGE[0]))
    tau = rng.uniform(*tau_r) * (1.6 - 1.0 * lr_pos)
    alpha = rng.uniform(*exp_r)
    i = np.arange(1, n + 1, dtype=np.float64)
    g = (1.0 + i / tau) ** (-alpha)
    if rng.random() < p_plateau:
        start, width = rng.uniform(0.05, 0.4) * n, rng.uniform(10, 60)
        hold = rng.uniform(0.3, 0.8)
        g = g * (
            1.0
            - hold
            * (1.0 / (1.0 + np.exp(-(i - start) / (0.2 * width))))
            * (1.0 / (1.0 + np.exp((i - start - width) / (0.2 * width))))
        )
        g = np.minimum.accumulate(np.maximum(g, 0.0)) if rng.random() < 0.5 else g
    mean = floor + (init * rng.uniform(0.98, 1.02) - floor) * g
    sigma = min(0.2, noise * np.sqrt(16.0 / batch_size) * 0.5)
    z = np.empty(n)
    z[0] = rng.normal()
    for t in range(1, n):
        z[t] = 0.6 * z[t - 1] + 0.8 * rng.normal()
    return (mean * np.exp(sigma * z - 0.5 * sigma**2)).astype(np.float32)


def make_records(families=ALL_FAMILIES, counts=None, seed: int = 0, cap_scale: float = 1.0):
    """Yield bank records for the families and per-split counts (OOD families get only ``pool``)."""
    counts = counts or SPLIT_COUNTS
    created = _dt.datetime.now(_dt.timezone.utc).isoformat(timespec="seconds")
    for f_idx, fam in enumerate(families):
        cap = max(8, int(generation_cap(fam) * cap_scale))
        splits = counts if fam in ID_FAMILIES else {"pool": counts["pool"]}
        for split, n_curves in splits.items():
            for j in range(n_curves):
                cseed = int(
                    np.random.SeedSequence(
                        [seed, f_idx, ["fm_train", "fm_val", "pool"].index(split), j]
                    ).generate_state(1)[0]
                )
                rng = np.random.default_rng(cseed)
                bs = int(rng.choice(DOMAIN_BATCH_SIZES[FAMILY_DOMAIN[fam]]))
                lr = float(np.exp(rng.uniform(np.log(LR_RANGE[0]), np.log(LR_RANGE[1]))))
                yield {
                    "curve_id": f"{fam}/{split}/{j:04d}",
                    "family": fam,
                    "split": split,
                    "data_source": "parametric",
                    "batch_size": bs,
                    "lr": lr,
                    "seed": cseed,
                    "losses": parametric_curve(fam, bs, lr, rng, cap),
                    "meta": {
                        "generator": "mara.curves.parametric",
                        "created_at": created,
                        "python": platform.python_version(),
                    },
                }


def build_parametric_bank(
    out, families=ALL_FAMILIES, counts=None, seed: int = 0, target: float = 0.70, cap_scale: float = 1.0
):
    """Generate, calibrate (ε per family for Oracle ≈ target) and write a parametric bank; returns the path."""
    records = list(make_records(families, counts, seed, cap_scale))
    path = write_bank(out, records, {"generator": "mara.curves.parametric", "seed": seed})
    bank = load_bank(path)
    params = calibrate_family_params(bank, PAPER_FAMILY_PARAMS, target=target, seed=seed, families=families)
    return write_bank(
        out,
        records,
        {"generator": "mara.curves.parametric", "seed": seed, "family_params": params, "calibration_target": target},
    )


def main(argv=None) -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--out", default="mara/data/banks/parametric.parquet")
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--target", type=float, default=0.70)
    args = ap.parse_args(argv)
    path = build_parametric_bank(args.out, seed=args.seed, target=args.target)
    bank = load_bank(path)
    print(f"wrote {path}: {len(bank)} curves; family_params = {json.dumps(bank.family_params, indent=1)}")


if __name__ == "__main__":
    main()
