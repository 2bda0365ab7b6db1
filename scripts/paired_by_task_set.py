"""Paired differences per task set: ``scripts/paired_table.py``'s pairing (± standard error over episodes), one row
per (task set, pair of methods), to see where a gap sits.

    python scripts/paired_by_task_set.py RESULTS_JSON[,RESULTS_JSON...] BASE METHOD [METHOD ...]

prints ``METHOD − BASE`` per load for each task set of the runs.
"""

from __future__ import annotations

import json
import sys

from mara.report.decomposition import episode_success, paired_difference


def main(path: str, base: str, methods: list[str]) -> None:
    rows = [r for p in path.split(",") for r in json.loads(open(p).read())["rows"]]
    loads = sorted({float(r["load"]) for r in rows})
    print("| task set | paired difference | " + " | ".join(f"p = {p:g}" for p in loads) + " |")
    print("|---|---|" + "---:|" * len(loads))
    for ts in sorted({r["task_set"] for r in rows}):
        per = {p: episode_success([r for r in rows if r["task_set"] == ts], p) for p in loads}
        for m in methods:
            cells = []
            for p in loads:
                d = paired_difference(per[p].get(m, {}), per[p].get(base, {}))
                cells.append("–" if d is None else f"{d['diff']:+.2f} ± {d['se']:.2f}")
            print(f"| {ts} | {m} − {base} | " + " | ".join(cells) + " |")


if __name__ == "__main__":
    if len(sys.argv) < 4:
        print(
            "usage: python scripts/paired_by_task_set.py RESULTS_JSON[,...] BASE METHOD [METHOD ...]", file=sys.stderr
        )
        sys.exit(2)
    main(sys.argv[1], sys.argv[2], sys.argv[3:])
