"""MARA against the trace baselines over several clusters' runs: share met per method, MARA's paired difference to
each baseline (mean ± standard error over windows, identical jobs), and the worst job-size class per method.

    python scripts/trace_mara_table.py <run folder> ... [<run folder>=EDF-rule]   # a trace's folders are merged;
    # =EDF-rule: that folder's MARA rows ran the edf teacher rule on MARA's allocator (trace_scheduler.rule=edf)
"""

import json
import sys
from pathlib import Path

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


def fmt(m, s) -> str:
    return f"{m:.3f} ± {s:.3f}"


def main(folders) -> None:
    print("| cluster | " + " | ".join(("MARA",) + BASE) + " | MARA − ElasticFlow | MARA − ElasticFlow-true |")
    print("|---" * (len(BASE) + 4) + "|")
    means: dict = {}
    worst: dict = {}
    by_class: dict = {}  # method -> size class -> [share met per cluster]
    runs: dict = {}  # trace -> rows of every folder that replayed it (one folder per method is fine: same windows)
    for f in folders:
        f, _, label = f.partition(
            "="
        )  # folder=Label: its MARA rows are another scheduler's (a rule on MARA's allocator)
        res = json.loads((Path(f) / "results.json").read_text())
        rows = [dict(r, method=label) if label and r["method"] == "MARA" else r for r in res["rows"]]
        runs.setdefault(Path(res["protocol"]["trace"]).stem.replace("cluster", ""), []).extend(rows)
    for name, rows in runs.items():
        have = sorted({r["method"] for r in rows})
        cells, pw = [], {}
        for m in ("MARA",) + BASE:
            if m not in have:
                cells.append("—")
                continue
            pw[m] = per_window(rows, m)
            mu, se = mean_se(list(pw[m].values()))
            means.setdefault(m, []).append(mu)
            cells.append(fmt(mu, se))
            cls = {c: per_window(rows, m, c) for c in CLASSES}
            cls = {c: float(np.mean(list(v.values()))) for c, v in cls.items() if v}
            worst.setdefault(m, []).append(min(cls.values()))
            for c, v in cls.items():
                by_class.setdefault(m, {}).setdefault(c, []).append(v)
        for b in ("ElasticFlow", "ElasticFlow-true"):
            if "MARA" in pw and b in pw:
                d = [pw["MARA"][w] - pw[b][w] for w in pw["MARA"]]
                cells.append(fmt(*mean_se(d)))
            else:
                cells.append("—")
        print(f"| {name} | " + " | ".join(cells) + " |")
    print(
        "| mean | " + " | ".join(f"{np.mean(means[m]):.3f}" if m in means else "—" for m in ("MARA",) + BASE) + " | | |"
    )
    print(
        "| worst size class (mean over clusters) | "
        + " | ".join(f"{np.mean(worst[m]):.3f}" if m in worst else "—" for m in ("MARA",) + BASE)
        + " | | |"
    )
    print("\n| method | " + " | ".join(f"{c} GPUs" for c in CLASSES) + " | worst class |")
    print("|---" * (len(CLASSES) + 2) + "|")
    for m, d in by_class.items():
        vals = {c: float(np.mean(v)) for c, v in d.items()}
        print(
            f"| {m} | "
            + " | ".join(f"{vals[c]:.3f}" if c in vals else "—" for c in CLASSES)
            + f" | {min(vals.values()):.3f} |"
        )


if __name__ == "__main__":
    main(sys.argv[1:])
