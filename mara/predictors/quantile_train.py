"""``python -m mara.predictors.quantile_train [paths.output_dir=DIR] [seed=S] [predictor.train.max_epochs=N] ...``:
train the decision head.

The command line is parsed here, once (conf/predictor/qr.yaml under ``predictor``, ``key=value`` over it), into a
typed ``PredictorTraining``; ``train_head`` (mara/predictors/qr/train.py) reads only that.
"""

import sys

from mara.core.cli import command_line_config, standalone_main
from mara.predictors.fit_settings import HeadFitSettings, PredictorTraining
from mara.predictors.qr.train import train_head


def settings_from_cli(argv: list[str]) -> PredictorTraining:
    """The command line's settings."""
    return PredictorTraining.from_command_line(command_line_config(argv, "qr", "outputs/qr"), HeadFitSettings, "qr")


if __name__ == "__main__":
    standalone_main(sys.argv[1:], settings_from_cli, train_head)
