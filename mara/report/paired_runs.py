"""Paired differences between methods stored in several runs (± standard error over identical episodes): each
series is one method of one run (optionally one training seed of it), compared with the first series per load and
over all loads (``decomposition.paired_difference`` over the (task set, load, root, episode) keys).
"""

from __future__ import annotations

import numpy as np

from mara.report.decomposition import paired_difference


def per_episode(rows: list[dict], method: str, seed: int | None = None) -> dict:
    """{(task set, load, root, episode): success %} of ``method`` (of training seed ``seed`` when given; several
    seeds averaged); {} when the rows have none."""
    out: dict = {}
    for r in rows:
        if r["method"] == method and (seed is None or r.get("train_seed") == seed):
            out.setdefault((r["task_set"], float(r["load"]), r["root"], r["episode"]), []).append(
                100.0 * r["success_rate"]
            )
    return {k: float(np.mean(v)) for k, v in out.items()}


def paired_runs_table(series: list[tuple[str, dict]]) -> str:
    """The markdown table of ``[(label, per_episode series)]``: mean per load, mean, Δ to the first series."""
    loads = sorted({k[1] for k in series[0][1]})
    ref_label, ref = series[0]
    out = ["| reading | " + " | ".join(f"p = {p:g}" for p in loads) + " | mean | Δ vs " + ref_label + " (all loads) |"]
    out.append("|---" * (len(loads) + 3) + "|")
    for label, s in series:
        means = [np.mean([v for k, v in s.items() if k[1] == p]) for p in loads]
        d = paired_difference(s, ref)
        per = [
            paired_difference({k: v for k, v in s.items() if k[1] == p}, {k: v for k, v in ref.items() if k[1] == p})
            for p in loads
        ]
        dl = " / ".join(f"{x['diff']:+.2f} ± {x['se']:.2f}" for x in per)
        out.append(
            f"| {label} | "
            + " | ".join(f"{m:.2f}" for m in means)
            + f" | {np.mean(means):.2f} | "
            + ("" if s is ref else f"{d['diff']:+.2f} ± {d['se']:.2f} ({dl})")
            + " |"
        )
    return "\n".join(out)
