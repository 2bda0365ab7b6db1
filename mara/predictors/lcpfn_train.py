"""``python -m mara.predictors.lcpfn_train stage=prior|finetune [paths.output_dir=DIR] [seed=S]
[init=<prior lcpfn.ckpt>] [predictor.prior_train.steps=N] ...``: train LC-PFN on its prior, or fine-tune it on the bank.

The command line is parsed here, once (conf/predictor/lcpfn.yaml under ``predictor``, ``key=value`` over it), into
the typed ``LCPFNFitSettings``; ``run_stage`` (mara/predictors/lcpfn/train.py) reads only that.
"""

import sys

from mara.core.cli import command_line_config, standalone_main
from mara.core.config import ConfigError
from mara.predictors.lcpfn.train import STAGES, LCPFNFitSettings, run_stage


def settings_from_cli(argv: list[str]) -> dict:
    """The command line's stage and its settings: ``run_stage``'s arguments."""
    plain = command_line_config(argv, "lcpfn", "outputs/lcpfn", extra={"stage": "prior", "init": None})
    stage, init = str(plain["stage"]), plain["init"]
    if stage not in STAGES:
        raise ConfigError(f"stage must be {' or '.join(STAGES)}, got {stage!r}")
    if stage == "finetune" and not init:
        raise ConfigError("stage=finetune needs init=<a prior-trained lcpfn.ckpt>")
    fit = LCPFNFitSettings.from_config(plain["predictor"])
    out, bank_path = plain["paths"]["output_dir"], plain["bank"]["path"]
    return {"stage": stage, "fit": fit, "out": out, "seed": int(plain["seed"]), "init": init, "bank_path": bank_path}


def trained(args: dict) -> dict:
    """The stage's record, without its per-step history."""
    rec = run_stage(**args)
    rec.pop("history", None)
    return rec


if __name__ == "__main__":
    standalone_main(sys.argv[1:], settings_from_cli, trained)
