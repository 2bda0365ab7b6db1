"""``python -m mara.predictors.train [config.yaml] key=value ...``: train the flow predictor.

The command line is parsed here, once (conf/predictor/fm.yaml under ``predictor``, then YAML files, then
``key=value`` pairs), into a typed ``PredictorTraining``; ``train_predictor`` (mara/predictors/fm/train.py) reads
only that.
"""

import sys

from mara.core.cli import command_line_config, standalone_main
from mara.predictors.fit_settings import FlowFitSettings, PredictorTraining
from mara.predictors.fm.train import train_predictor


def settings_from_cli(argv: list[str]) -> PredictorTraining:
    """The command line's settings."""
    return PredictorTraining.from_command_line(
        command_line_config(argv, "fm", "outputs/predictor", yaml_files=True), FlowFitSettings, "fm"
    )


def trained(settings: PredictorTraining) -> dict | None:
    """The run's record (None on a DDP rank that exported no checkpoint)."""
    result = train_predictor(settings)
    return result if "fm_ckpt" in result else None


if __name__ == "__main__":
    standalone_main(sys.argv[1:], settings_from_cli, trained)
