"""Decision-head checkpoints side by side on validation curves only (mara.predictors.context_validate's ``validate``):
fm_val (the trained families: the ID task set's validation) and the cal curves' halves (RL, ViT: the OOD task sets'
validation) — MAE, q10–q90 coverage and band width of each, all queries and per observation-count bin.

    python scripts/experiments/head_ckpt_validate.py NAME=CKPT [NAME=CKPT ...]

each CKPT read as predictor ``qr`` (conf/predictor/qr.yaml) with ``ckpt_path`` set; ``NAME=shipped`` reads the
shipped head.
"""

from __future__ import annotations

import sys

from omegaconf import OmegaConf

from mara.curves.bank import default_bank_path
from mara.predictors.context_validate import print_table, validate
from mara.predictors.factory import predictor_config, predictor_from


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


if __name__ == "__main__":
    main(sys.argv[1:])
