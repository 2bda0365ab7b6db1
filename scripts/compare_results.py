"""Row-by-row comparison of two results.json files of the same protocol: per method, how many rows (method, task set,
load, root, training seed, episode) differ in any recorded outcome (a bound's solve seconds, a wall clock, aside).
Used to show that a change leaves every number of a method unchanged, e.g. against a checkout of an earlier commit:

    python scripts/compare_results.py BEFORE/results.json AFTER/results.json
"""

from __future__ import annotations

import json
import sys

KEY = ("method", "task_set", "load", "root", "train_seed", "episode")
CLOCK = ("solve_time_s",)  # wall-clock seconds of a bound's solve: they differ between any two runs, not an outcome


def rows(path: str) -> dict[tuple, dict]:
    """Each row of ``path`` by its key, without its wall-clock fields."""
    return {
        tuple(r.get(k) for k in KEY): {k: v for k, v in r.items() if k not in CLOCK}
        for r in json.load(open(path))["rows"]
    }


def main(before: str, after: str) -> int:
    a, b = rows(before), rows(after)
    differing_total = 0
    for m in sorted({k[0] for k in a} | {k[0] for k in b}):
        ka, kb = {k for k in a if k[0] == m}, {k for k in b if k[0] == m}
        differing = sum(a[k] != b[k] for k in ka & kb) + len(ka ^ kb)
        differing_total += differing
        print(f"{m:22s} rows {len(ka):5d} / {len(kb):5d}  differing {differing}")
    return 1 if differing_total else 0


if __name__ == "__main__":
    if len(sys.argv) != 3:
        sys.exit("usage: python scripts/compare_results.py BEFORE/results.json AFTER/results.json")
    sys.exit(main(sys.argv[1], sys.argv[2]))
