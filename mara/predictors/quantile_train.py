"""``python -m mara.predictors.quantile_train key=value ...``: train the decision head."""

import sys

from mara.predictors.qr.train import main

if __name__ == "__main__":
    main(sys.argv[1:])
