"""The held-out-family check behind fm_cal's rule for families it never saw: per rule and observation bins, the
coverage of the calibrated band on each family when that family's offsets are left out (the shipped FM).

    python scripts/experiments/fm_cal_heldout.py
"""

from __future__ import annotations

import numpy as np

from mara.curves.bank import default_bank_path, load_bank
from mara.predictors.factory import predictor_from
from mara.predictors.fm.calibrated import held_out_family_coverage


def main() -> None:
    p = predictor_from("fm_cal", default_bank_path())
    print(
        "obs bins",
        p.obs_bins,
        "offsets:",
        {k: np.round(v, 3).tolist() for k, v in p.offsets.items()},
        "novel:",
        np.round(p.novel, 3).tolist(),
    )
    for (rule, bins), cov in held_out_family_coverage(p.fm, load_bank(default_bank_path())).items():
        v = np.array(list(cov.values()))
        print(
            f"{rule:15s} obs bins {bins!s:8s} held-out coverage min {100 * v.min():.1f} mean {100 * v.mean():.1f} % |",
            " ".join(f"{k} {100 * c:.0f}" for k, c in cov.items()),
        )


if __name__ == "__main__":
    main()
