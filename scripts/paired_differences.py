"""Paired differences between methods stored in several results.json files (± standard error over identical episodes).

Usage: python scripts/paired_differences.py REF_LABEL=run_dir:Method OTHER_LABEL=run_dir:Method ...
``run_dir:Method@S`` keeps only the rows of training seed S (a learned method's policies).
Prints, per load and over all loads, each method's mean success (%) and its paired difference to the first one
(± s.e., mara.report.decomposition.paired_difference over the (task set, load, root, episode) keys).
"""

from __future__ import annotations

import json
import sys

import numpy as np

from mara.report.decomposition import paired_difference


def per_episode(run_dir: str, method: str, seed: int | None = None) -> dict:
    rows = json.load(open(f"{run_dir}/results.json"))["rows"]
    out: dict = {}
    for r in rows:
        if r["method"] == method and (seed is None or r.get("train_seed") == seed):
            out.setdefault((r["task_set"], float(r["load"]), r["root"], r["episode"]), []).append(
                100.0 * r["success_rate"]
            )
    if not out:
        raise SystemExit(f"no rows of {method} in {run_dir}")
    return {k: float(np.mean(v)) for k, v in out.items()}


def main(argv):
    series = []
    for a in argv:
        label, spec = a.split("=", 1)
        run, method = spec.rsplit(":", 1)
        method, _, seed = method.partition("@")
        series.append((label, per_episode(run, method, int(seed) if seed else None)))
    loads = sorted({k[1] for k in series[0][1]})
    ref_label, ref = series[0]
    head = "| reading | " + " | ".join(f"p = {p:g}" for p in loads) + " | mean | Δ vs " + ref_label + " (all loads) |"
    print(head)
    print("|---" * (len(loads) + 3) + "|")
    for label, s in series:
        means = [np.mean([v for k, v in s.items() if k[1] == p]) for p in loads]
        d = paired_difference(s, ref)
        per = [
            paired_difference({k: v for k, v in s.items() if k[1] == p}, {k: v for k, v in ref.items() if k[1] == p})
            for p in loads
        ]
        dl = " / ".join(f"{x['diff']:+.2f} ± {x['se']:.2f}" for x in per)
        print(
            f"| {label} | "
            + " | ".join(f"{m:.2f}" for m in means)
            + f" | {np.mean(means):.2f} | "
            + ("" if s is ref else f"{d['diff']:+.2f} ± {d['se']:.2f} ({dl})")
            + " |"
        )


if __name__ == "__main__":
    if len(sys.argv) < 2 or sys.argv[1] in ("-h", "--help"):
        raise SystemExit(__doc__)
    main(sys.argv[1:])
