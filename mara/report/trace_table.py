"""MARA against the trace baselines over several clusters' trace runs: share met per method, MARA's paired
difference to each ElasticFlow (mean ± standard error over windows, identical jobs), and the worst job-size class
per method. The runs of one trace file are merged (one folder per method is fine: the same windows); a run labelled
``EDF-rule`` is one whose MARA rows ran the edf teacher rule on MARA's allocator (``trace_scheduler.rule=edf``).
"""

from __future__ import annotations

import numpy as np

BASE = ("EDF", "ElasticFlow", "ElasticFlow-true", "EDF-rule")
CLASSES = ("1", "2-4", "5-15", "16+")


def mean_se(x) -> tuple[float, float]:
    """Mean and standard error over windows (se 0 for one window)."""
    x = np.asarray(x, dtype=float)
    return float(x.mean()), (float(x.std(ddof=1) / np.sqrt(x.size)) if x.size > 1 else 0.0)


def per_window(rows, method, cls=None) -> dict:
    """{window: share met} of ``method`` (in size class ``cls`` when given)."""
    acc: dict = {}
    for r in rows:
        if r["method"] == method and (cls is None or r["size_class"] == cls):
            acc.setdefault(r["window"], []).append(r["deadline_met"])
    return {w: float(np.mean(v)) for w, v in acc.items()}


def _fmt(m, s) -> str:
    return f"{m:.3f} ± {s:.3f}"


def trace_mara_table(runs: dict[str, list[dict]]) -> str:
    """The two markdown tables of ``{trace name: rows of every run on it}`` (MARA rows relabelled already)."""
    methods = ("MARA",) + BASE
    out = ["| cluster | " + " | ".join(methods) + " | MARA − ElasticFlow | MARA − ElasticFlow-true |"]
    out.append("|---" * (len(BASE) + 4) + "|")
    means: dict = {}
    worst: dict = {}
    by_class: dict = {}  # method -> size class -> [share met per cluster]
    for name, rows in runs.items():
        have = {r["method"] for r in rows}
        cells, pw = [], {}
        for m in methods:
            if m not in have:
                cells.append("—")
                continue
            pw[m] = per_window(rows, m)
            mu, se = mean_se(list(pw[m].values()))
            means.setdefault(m, []).append(mu)
            cells.append(_fmt(mu, se))
            cls = {c: per_window(rows, m, c) for c in CLASSES}
            cls = {c: float(np.mean(list(v.values()))) for c, v in cls.items() if v}
            worst.setdefault(m, []).append(min(cls.values()))
            for c, v in cls.items():
                by_class.setdefault(m, {}).setdefault(c, []).append(v)
        for b in ("ElasticFlow", "ElasticFlow-true"):
            if "MARA" in pw and b in pw:
                cells.append(_fmt(*mean_se([pw["MARA"][w] - pw[b][w] for w in pw["MARA"]])))
            else:
                cells.append("—")
        out.append(f"| {name} | " + " | ".join(cells) + " |")
    out.append("| mean | " + " | ".join(f"{np.mean(means[m]):.3f}" if m in means else "—" for m in methods) + " | | |")
    out.append(
        "| worst size class (mean over clusters) | "
        + " | ".join(f"{np.mean(worst[m]):.3f}" if m in worst else "—" for m in methods)
        + " | | |"
    )
    out.append("\n| method | " + " | ".join(f"{c} GPUs" for c in CLASSES) + " | worst class |")
    out.append("|---" * (len(CLASSES) + 2) + "|")
    for m, d in by_class.items():
        vals = {c: float(np.mean(v)) for c, v in d.items()}
        out.append(
            f"| {m} | "
            + " | ".join(f"{vals[c]:.3f}" if c in vals else "—" for c in CLASSES)
            + f" | {min(vals.values()):.3f} |"
        )
    return "\n".join(out)
