"""``python -m mara.predictors.context_train key=value ...``: train the in-context decision head."""

import sys

from mara.predictors.qr_ctx.train import main

if __name__ == "__main__":
    main(sys.argv[1:])
