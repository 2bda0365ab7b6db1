"""``python -m mara.predictors.train key=value ...``: train the flow predictor."""

import sys

from mara.predictors.fm.train import main

if __name__ == "__main__":
    main(sys.argv[1:])
