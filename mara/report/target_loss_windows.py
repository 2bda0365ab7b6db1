"""The target-loss table over windows of consecutive jobs of several ITP clusters: per cluster, each method's
deadline-met ratio (mean ± standard error over windows) and its paired difference to ElasticFlow (declared counts)
on identical jobs, and the mean over clusters.

The runs lie as ``<out>/<cluster>/c<window>/<run>/results.json`` (``scripts/experiments/target_loss_windows.py``
writes them): a trace run's rows (a run named ``..._band-<band>`` labels its methods ``<method> (<band>)``; a bound
method's share is its window's proven bound over its jobs), or a capacity bound's ``{"bound": jobs met at most,
"jobs": jobs}``.
"""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np

BASE = "ElasticFlow"
BOUND = "Capacity-bound"


def met_by_method(out: Path, cluster: str, k: int) -> dict:
    """{method: {job_id: deadline_met}} over every run of a window (a bound: {"*": its share})."""
    res: dict = {}
    base = out / cluster / f"c{k}"
    for d in sorted(base.glob("*/results.json")) if base.exists() else []:
        r = json.loads(d.read_text())
        if "bound" in r:
            res[BOUND] = {"*": r["bound"] / r["jobs"]}
            continue
        tag = d.parent.name.split("_band-")
        for row in r["rows"]:
            m = row["method"] + (f" ({tag[1]})" if len(tag) > 1 else "")
            res.setdefault(m, {})[row["job_id"]] = row["deadline_met"]
        for w in r.get("windows", []):
            if "bound" in w:  # a bound method: the proven bound, not the selection its solve found
                res[w["method"]] = {"*": w["bound"] / w["jobs"]}
    return res


def mean_se(x) -> tuple[float, float]:
    x = np.asarray(list(x), dtype=float)
    return float(x.mean()), (float(x.std(ddof=1) / np.sqrt(x.size)) if x.size > 1 else 0.0)


def windows_table(out: Path, clusters, chunks, methods) -> str:
    """The markdown table of ``methods`` over ``clusters`` × windows ``chunks`` of the runs under ``out``."""
    lines = ["| cluster | " + " | ".join(methods) + " |", "|---|" + "---|" * len(methods)]
    over: dict = {m: [] for m in methods}
    for c in clusters:
        per = {k: met_by_method(out, c, k) for k in chunks}
        cells = []
        for m in methods:
            ks = [k for k in chunks if m in per[k]]
            if not ks:
                cells.append("-")
                continue
            wm = {k: float(np.mean(list(per[k][m].values()))) for k in ks}
            if len(ks) == len(chunks):
                over[m].append(np.mean(list(wm.values())))
            s = "{:.3f} ± {:.3f}".format(*mean_se(wm.values()))
            if m not in (BASE, BOUND) and all(BASE in per[k] for k in ks):
                for k in ks:
                    if set(per[k][m]) != set(per[k][BASE]):
                        raise ValueError(f"{c} c{k} {m}: not the same jobs as {BASE}")
                s += " ({:+.3f} ± {:.3f})".format(*mean_se(wm[k] - np.mean(list(per[k][BASE].values())) for k in ks))
            cells.append(s + ("" if len(ks) == len(chunks) else f" [{len(ks)} of {len(chunks)}]"))
        lines.append(f"| {c} | " + " | ".join(cells) + " |")
    lines.append(
        "| mean over clusters | "
        + " | ".join(
            "{:.3f} ± {:.3f}".format(*mean_se(over[m])) if len(over[m]) == len(clusters) else "-" for m in methods
        )
        + " |"
    )
    return "\n".join(lines)
