"""The paper's tables as rows: each cell ours (mean, std, n) beside the published number and the difference.

Built from a run's ``results.json`` summaries (``mara.eval``) and the paper's numbers
(:mod:`mara.report.paper_numbers`); generic over the methods present. :mod:`mara.report.paper_markdown` prints them.
"""

from __future__ import annotations

import numpy as np

from mara.eval.metrics import summarize
from mara.report import paper_numbers as P
from mara.report.results import ordered_methods


def summary_cell(c) -> dict | None:
    """Our summary cell {mean, std, n} (or None)."""
    return c if c and c.get("mean") is not None else None


def _pair(ours: dict | None, paper: tuple | float | None) -> dict:
    """One report cell: ours (mean, std, n), the paper's (mean, std) and the difference of the means."""
    pm, ps = (paper if isinstance(paper, tuple) else (paper, None)) if paper is not None else (None, None)
    om = ours["mean"] if ours else None
    return {
        "ours": om,
        "ours_std": ours["std"] if ours else None,
        "n": ours.get("n") if ours else None,
        "paper": pm,
        "paper_std": ps,
        "diff": (om - pm) if om is not None and pm is not None else None,
    }


def table1(pred: dict | None) -> list[dict]:
    rows = []
    for ts in P.TASK_SETS:
        for model in ("FM", "WLS"):
            r = ((pred or {}).get(ts) or {}).get(model)
            paper = P.TABLE1.get(ts, {}).get(model)
            ours = (r["mae"], 100 * r["budget_acc"], r["ms_per_prefix"]) if r else (None, None, None)
            rows.append(
                {
                    "task_set": ts,
                    "model": model,
                    **{
                        k: {"ours": o, "paper": p, "diff": (o - p) if o is not None and p is not None else None}
                        for k, o, p in zip(("mae", "budget_acc", "ms_per_prefix"), ours, paper or (None,) * 3)
                    },
                }
            )
    return rows


def table2(summary: dict, load: str = "0.04") -> list[dict]:
    rows = []
    for m in ordered_methods(summary):
        row = {"method": m}
        for ts in (*P.TASK_SETS, "Average"):
            row[ts] = _pair(summary_cell(summary[m].get(ts, {}).get(load)), P.TABLE2.get(m, {}).get(ts))
        rows.append(row)
    return rows


def table3(summary: dict) -> list[dict]:
    rows = []
    for m in ordered_methods(summary):
        per = summary[m].get("stress") or next(iter(summary[m].values()), {})
        stress_cell = summary_cell(next(iter(per.values()), None)) if per else None
        rows.append({"method": m, "success": _pair(stress_cell, P.TABLE3.get(m))})
    return rows


def table4(diagnostics: dict) -> list[dict]:
    rows = []
    for m in ordered_methods(diagnostics):
        d = diagnostics[m]
        if summary_cell(d.get("utilization")) is None:
            continue
        rows.append(
            {
                "method": m,
                **{
                    k: _pair(summary_cell(d.get(k)), P.TABLE4.get(m, {}).get(k))
                    for k in ("utilization", "queue_full", "waiting", "ready")
                },
            }
        )
    return rows


def table5(summary: dict, load: str = "0.04") -> list[dict]:
    rows = []
    for ts in (*P.TASK_SETS, "Average"):
        row = {"task_set": ts}
        for m in P.TABLE5:
            row[m] = _pair(summary_cell(summary.get(m, {}).get(ts, {}).get(load)), P.TABLE5[m].get(ts))
        row["Clairvoyant"] = _pair(summary_cell(summary.get("Clairvoyant", {}).get(ts, {}).get(load)), None)
        rows.append(row)
    return rows


def protocol_stats(res: dict) -> list[dict]:
    """Per load: tasks per episode (equal weight to the task sets), Oracle and Clairvoyant levels, ours and the
    paper's."""
    rows = res.get("rows") or []
    gen = [r for r in rows if r["method"] == "Oracle"] or [
        r for r in rows if r["method"] == (rows[0]["method"] if rows else None)
    ]
    counts = summarize(gen, key="n_tasks", scale=1.0)
    per_method = next(iter(counts.values()), {})
    avg = per_method.get("Average") or next(iter(per_method.values()), {})
    out = []
    for load in sorted(avg, key=float):
        p = float(load)
        out.append(
            {
                "load": p,
                "tasks_per_episode": _pair(summary_cell(avg[load]), P.TASKS_PER_EPISODE.get(round(p, 2))),
                "oracle": _pair(
                    summary_cell(res["summary"].get("Oracle", {}).get("Average", {}).get(load)),
                    P.FIGURE4["Oracle"].get(round(p, 2)),
                ),
                "clairvoyant": _pair(
                    summary_cell(res["summary"].get("Clairvoyant", {}).get("Average", {}).get(load)), None
                ),
            }
        )
    return out


def by_load(summary: dict, stress: dict) -> list[dict]:
    """Every method's average success (%) at every load and in the stress scenario (Figure 4's numbers)."""
    loads = sorted({ld for m in summary.values() for ts in m.values() for ld in ts}, key=float)
    rows = []
    for m in ordered_methods(summary):
        key = "Average" if "Average" in summary[m] else next(iter(summary[m]))
        st = stress.get(m) or {}
        st_cell = (
            summary_cell(next(iter((st.get("stress") or next(iter(st.values()), {})).values()), None)) if st else None
        )
        rows.append(
            {"method": m, "loads": {ld: summary_cell(summary[m][key].get(ld)) for ld in loads}, "stress": st_cell}
        )
    return rows


def paired_differences(rows: list[dict], ref: str = "MARA", load: float = 0.04) -> list[dict]:
    """``ref`` minus every other method at ``load`` on identical episodes: mean and standard error of the
    per-episode difference (learned methods averaged over training seeds first), next to the paper's
    difference of Table 2 / Table 5 averages where both methods are there."""
    per: dict = {}
    for r in rows:
        if abs(float(r["load"]) - load) > 1e-9:
            continue
        k = (r["task_set"], r["root"], r["episode"])
        per.setdefault(r["method"], {}).setdefault(k, []).append(100.0 * r["success_rate"])
    if ref not in per:
        return []
    base = {k: float(np.mean(v)) for k, v in per[ref].items()}
    paper_avg = {m: v["Average"][0] for m, v in {**P.TABLE2, **P.TABLE5}.items() if "Average" in v}
    out = []
    for m in ordered_methods(per):
        if m == ref:
            continue
        d = np.array([base[k] - float(np.mean(v)) for k, v in per[m].items() if k in base])
        if not len(d):
            continue
        se = float(d.std(ddof=1) / np.sqrt(len(d))) if len(d) > 1 else None
        pd = (paper_avg[ref] - paper_avg[m]) if ref in paper_avg and m in paper_avg else None
        out.append({"method": m, "diff": float(d.mean()), "se": se, "n_episodes": int(len(d)), "paper_diff": pd})
    return out
