"""A method's mean success as a share of a bound's (MARA / Clairvoyant) per load, paired over identical episodes:
the ratio of means mean(method) / mean(bound) ± its delta-method standard error (``share_closed`` with a zero
baseline: the same pairing, learned methods averaged over training seeds first), and the paired difference
``method − target × bound`` ± s.e. (the target is met where it is ≥ 0).
"""

from __future__ import annotations

import numpy as np

from mara.report.decomposition import episode_success, paired_difference, share_closed


def ratio_table(rows: list[dict], bound: str, target: float, methods: list[str]) -> str:
    """One line per method × load with at least two episodes shared with ``bound``."""
    loads = sorted({float(r["load"]) for r in rows})
    per = {p: episode_success(rows, p) for p in loads}
    out = [f"| method | p | mean | {bound} | ratio ± s.e. (delta method) | method − {target:g} × {bound} | episodes |"]
    out.append("|---|---:|---:|---:|---:|---:|---:|")
    for m in methods:
        for p in loads:
            a, b = per[p].get(m, {}), per[p].get(bound, {})
            keys = sorted(set(a) & set(b))
            if len(keys) < 2:
                continue
            ratio = share_closed({k: a[k] for k in keys}, {k: 0.0 for k in keys}, {k: b[k] for k in keys})
            d = paired_difference({k: a[k] for k in keys}, {k: target * b[k] for k in keys})
            out.append(
                f"| {m} | {p:g} | {np.mean([a[k] for k in keys]):.2f} | {np.mean([b[k] for k in keys]):.2f} | "
                f"{ratio['share']:.4f} ± {ratio['se']:.4f} | {d['diff']:+.2f} ± {d['se']:.2f} | {len(keys)} |"
            )
    return "\n".join(out)
