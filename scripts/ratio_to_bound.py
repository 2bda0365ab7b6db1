"""A method's mean success as a share of a bound's (MARA / Clairvoyant) per load, paired over identical episodes.

    python scripts/ratio_to_bound.py RESULTS_JSON[,RESULTS_JSON...] BOUND TARGET METHOD [METHOD ...]

prints a markdown table: per load and method the ratio of means mean(method) / mean(bound) ± its delta-method
standard error over episodes (``share_closed`` with a zero baseline: the same pairing, learned methods averaged over
training seeds first), and the paired difference ``method − TARGET × bound`` ± s.e. (the target is met where it is
≥ 0). Several runs on the same episodes (the same protocol, other methods) are read together.
"""

from __future__ import annotations

import json
import sys

import numpy as np

from mara.report.decomposition import episode_success, paired_difference, share_closed


def main(paths: str, bound: str, target: float, methods: list[str]) -> None:
    rows = [r for p in paths.split(",") for r in json.loads(open(p).read())["rows"]]
    loads = sorted({float(r["load"]) for r in rows})
    per = {p: episode_success(rows, p) for p in loads}
    print(f"| method | p | mean | {bound} | ratio ± s.e. (delta method) | method − {target:g} × {bound} | episodes |")
    print("|---|---:|---:|---:|---:|---:|---:|")
    for m in methods:
        for p in loads:
            a, b = per[p].get(m, {}), per[p].get(bound, {})
            keys = sorted(set(a) & set(b))
            if len(keys) < 2:
                continue
            ratio = share_closed({k: a[k] for k in keys}, {k: 0.0 for k in keys}, {k: b[k] for k in keys})
            d = paired_difference({k: a[k] for k in keys}, {k: target * b[k] for k in keys})
            print(
                f"| {m} | {p:g} | {np.mean([a[k] for k in keys]):.2f} | {np.mean([b[k] for k in keys]):.2f} | "
                f"{ratio['share']:.4f} ± {ratio['se']:.4f} | {d['diff']:+.2f} ± {d['se']:.2f} | {len(keys)} |"
            )


if __name__ == "__main__":
    if len(sys.argv) < 5:
        print("usage: ratio_to_bound.py RESULTS_JSON[,...] BOUND TARGET METHOD [METHOD ...]", file=sys.stderr)
        sys.exit(2)
    try:
        target = float(sys.argv[3])
    except ValueError:
        print(f"error: TARGET must be a number, got {sys.argv[3]!r}", file=sys.stderr)
        sys.exit(2)
    main(sys.argv[1], sys.argv[2], target, sys.argv[4:])
