"""``python -m mara.predictors.context_train [paths.output_dir=DIR] [seed=S] [predictor.context.members=N] ...``:
train the in-context decision head.

The command line is parsed here, once (conf/predictor/qr_ctx.yaml under ``predictor``, ``key=value`` over it), into
a typed ``PredictorTraining``; ``train_context_head`` (mara/predictors/qr_ctx/train.py) reads only that.
"""

import sys

from mara.core.cli import command_line_config, standalone_main
from mara.predictors.fit_settings import PredictorTraining
from mara.predictors.qr_ctx.train import ContextFitSettings, train_context_head


def settings_from_cli(argv: list[str]) -> PredictorTraining:
    """The command line's settings."""
    return PredictorTraining.from_command_line(
        command_line_config(argv, "qr_ctx", "outputs/qr_ctx"), ContextFitSettings, "qr_ctx"
    )


if __name__ == "__main__":
    standalone_main(sys.argv[1:], settings_from_cli, train_context_head)
