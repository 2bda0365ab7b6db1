"""``python -m mara.readme_tables run=OUT [readme=docs/results.md]``: the measured tables of docs/results.md
(logic: ``mara.report.tables``)."""

import sys

from mara.report.tables import main

if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
