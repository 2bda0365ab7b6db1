"""``python -m mara.predictors.lcpfn_train key=value ...``: train LC-PFN on its prior or fine-tune it on the bank."""

import sys

from mara.predictors.lcpfn.train import main

if __name__ == "__main__":
    main(sys.argv[1:])
